#!/usr/bin/env python3
# (No cuobjdump needed: here the compiler machine has NVRTC but no CUDA binutils. Cubins: bench_mma_gemv compile DIR.)
"""Registers and stack frame of each kernel in a CUDA cubin (ELF), from .nv.info's EIATTR_REGCOUNT (0x2f) and
EIATTR_FRAME_SIZE (0x11) records [symbol, value]; no cuobjdump needed. Usage: cubin_regs.py CUBIN [REGEX]"""
import struct, sys, re
def main(path, pat):
    b = open(path, 'rb').read()
    shoff, = struct.unpack_from('<Q', b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', b, 0x3A)
    secs = [struct.unpack_from('<IIQQQQIIQQ', b, shoff + i * shentsize) for i in range(shnum)]
    def cstr(off): return b[off:b.index(b'\0', off)].decode()
    shstr = secs[shstrndx][4]
    names = [cstr(shstr + s[0]) for s in secs]
    sym = {}
    for s in secs:
        if s[1] == 2:  # SHT_SYMTAB
            strtab = secs[s[6]][4]
            for i in range(s[5] // 24):
                n, = struct.unpack_from('<I', b, s[4] + 24 * i)
                sym[i] = cstr(strtab + n)
    regs, frame, code = {}, {}, {}
    for s, n in zip(secs, names):
        if n.startswith('.text.'): code[n[6:]] = s[5]
        if n != '.nv.info': continue
        o, end = s[4], s[4] + s[5]
        while o < end:
            fmt, attr = b[o], b[o + 1]
            if fmt == 4:
                sz, = struct.unpack_from('<H', b, o + 2)
                if sz == 8:
                    i, v = struct.unpack_from('<II', b, o + 4)
                    if attr == 0x2f: regs[sym.get(i, i)] = v
                    if attr == 0x11: frame[sym.get(i, i)] = v
                o += 4 + sz
            else:
                o += 4 if fmt in (2, 3) else 2
    for k in sorted(code):
        if pat and not re.search(pat, k): continue
        print(f"{k}: regs {regs.get(k, '?')} frame {frame.get(k, '?')} code {code[k]} B")
if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
