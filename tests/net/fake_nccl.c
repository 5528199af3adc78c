// A stand-in for libnccl.so.2 (tests/net only, found through LD_LIBRARY_PATH): unique ids that say which
// process made them; every other call fails (ncclInternalError = 3), which the test never reaches.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;

int ncclGetUniqueId(ncclUniqueId* id) {
  static int count = 0;
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "fake nccl id %d of process %d", count++, (int)getpid());
  return 0;
}
int ncclGetVersion(int* v) { *v = 22000; return 0; }
const char* ncclGetErrorString(int r) { (void)r; return "the fake NCCL of tests/net"; }

#define FAIL(name) \
  int name(void) { return 3; }
FAIL(ncclCommInitRank)
FAIL(ncclCommInitAll)
FAIL(ncclCommDestroy)
FAIL(ncclCommAbort)
FAIL(ncclAllReduce)
FAIL(ncclAllGather)
FAIL(ncclSend)
FAIL(ncclRecv)
FAIL(ncclBroadcast)
FAIL(ncclGroupStart)
FAIL(ncclGroupEnd)
