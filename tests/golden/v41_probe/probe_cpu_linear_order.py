# Probe: which fp32 summation order does torch's CPU F.linear use for [T,1024]x[1024,24]^T on this machine?
import numpy as np, torch, torch.nn.functional as F, platform, subprocess, json, sys, os
out = {}
out["cpu"] = subprocess.run("lscpu | grep -E 'Model name|Flags' | cut -c1-400", shell=True, capture_output=True, text=True).stdout
out["capability"] = torch.backends.cpu.get_cpu_capability()
out["threads"] = torch.get_num_threads()
out["mkl"] = torch.backends.mkl.is_available()
out["mkldnn"] = torch.backends.mkldnn.is_available()
rng = np.random.default_rng(0)
T, K, N = 69, 1024, 24
x = rng.standard_normal((T, K)).astype(np.float32)
w = (rng.standard_normal((N, K)) * 0.05).astype(np.float32)
res = {}
for th in [1, 2, 4, 16]:
    torch.set_num_threads(th)
    res[th] = F.linear(torch.from_numpy(x), torch.from_numpy(w)).numpy()
y1 = F.linear(torch.from_numpy(x[:1]), torch.from_numpy(w)).numpy()
out["thread_invariant"] = all(np.array_equal(res[1], res[t]) for t in res)
out["row1_equals_row0_of_69"] = bool(np.array_equal(y1[0], res[1][0]))
y = res[1]
f32 = np.float32
def fma(a, b, c):  # exact product in f64, one rounding (double rounding rare)
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)
prod = x[:, None, :] * w[None, :, :]  # f32 products (rounded), [T,N,K]
xb = np.broadcast_to(x[:, None, :], (T, N, K)); wb = np.broadcast_to(w[None, :, :], (T, N, K))
cands = {}
def lanes(L, use_fma, kc=None, tree=True):
    acc_out = np.zeros((T, N), np.float32)
    kc = kc or K
    for k0 in range(0, K, kc):
        acc = np.zeros((T, N, L), np.float32)
        for k in range(k0, min(K, k0 + kc), L):
            a = xb[:, :, k:k+L]; b = wb[:, :, k:k+L]
            acc = fma(a, b, acc) if use_fma else (acc + (a * b).astype(np.float32)).astype(np.float32)
        # reduce lanes
        v = acc
        if tree:
            while v.shape[-1] > 1:
                h = v.shape[-1] // 2
                v = (v[..., :h] + v[..., h:]).astype(np.float32)
            s = v[..., 0]
        else:
            s = np.zeros((T, N), np.float32)
            for j in range(L): s = (s + v[..., j]).astype(np.float32)
        acc_out = (acc_out + s).astype(np.float32) if k0 else s
    return acc_out
for L in [1, 4, 8, 16, 32, 64]:
    for use_fma in [False, True]:
        for tree in ([True, False] if L > 1 else [True]):
            for kc in [None, 128, 256, 384, 512]:
                name = f"L{L}_{'fma' if use_fma else 'mul'}_{'tree' if tree else 'seq'}_kc{kc}"
                c = lanes(L, use_fma, kc, tree)
                cands[name] = int((c != y).sum())
best = sorted(cands.items(), key=lambda kv: kv[1])[:12]
out["best"] = best
out["total"] = T * N
exact = (x.astype(np.float64) @ w.astype(np.float64).T).astype(np.float32)
out["exact_f64_rounded_mismatch"] = int((exact != y).sum())
print(json.dumps(out, indent=1, default=str))
os.makedirs(os.environ.get("OUT", "/tmp"), exist_ok=True)
open(os.path.join(os.environ.get("OUT", "/tmp"), "probe.json"), "w").write(json.dumps(out, indent=1, default=str))
