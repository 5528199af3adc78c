// placeholder: filled by its owner
int main() { return 1; }
