import os, sys
def crc(inp, c):
    for i in range(4):
        byte=(inp>>(8*i))&0xFF
        c ^= byte<<24
        for _ in range(8):
            c = ((c<<1) ^ (0x1EDC6F41 if c & 0x80000000 else 0)) & 0xFFFFFFFF
    return c
def fp(nbuf, b):
    h=crc(crc(b,b),0); f=0
    for _ in range(nbuf): f=crc(h,f)
    return f
d=sys.argv[1]; os.makedirs(f"{d}/codelets/45",exist_ok=True)
B=(96,)
# made-up test numbers (µs): CPU and GPU means/stddevs of a fictitious machine "tiny"
kinds={"dgetrf_nopiv":(1,{"cpu":(2000.0,100.0)}),
       "dtrsm":(2,{"cpu":(3000.0,150.0),"cuda0":(400.0,20.0)}),
       "dgemm":(3,{"cpu":(6000.0,300.0),"cuda0":(500.0,25.0)})}
for sym,(nbuf,archs) in kinds.items():
    L=["##################","# Performance Model Version","45","","####################","# COMBs","# number of combinations",str(len(archs))]
    for ci,(arch,(m,s)) in enumerate(archs.items()):
        t=0 if arch=="cpu" else 1
        L+=["####################",f"# COMB_{ci}","# number of types devices","1","####################","# DEV_0","# device type (CPU - 0, CUDA - 1, OPENCL - 2, MIC - 3)",str(t),
            "####################","# DEV_0","# device id ",("0" if arch=="cpu" else arch[4:]),"####################","# DEV_0","# number of cores ","1","##########","# number of implementations","1","#####",
            f"# Model for {arch}_impl0 (Comb{ci})","# number of entries",str(len(B)),
            "# sumlnx\tsumlnx2\t\tsumlny\t\tsumlnxlny\talpha\t\tbeta\t\tn\tminx\t\tmaxx",
            "0.000000e+00\t0.000000e+00\t0.000000e+00\t0.000000e+00\tnan\tnan\t0\t0\t0",
            "# a\t\tb\t\tc","nan\tnan\tnan","# not multiple-regression-base","0",
            "# hash\t\tsize\t\tflops\t\tmean (us)\tdev (us)\tsum\t\tsum2\t\tn"]
        for b in B:
            n=100
            L.append(f"{fp(nbuf,b):08x}\t{nbuf*b*b*8}\t0.000000e+00\t{m:e}\t{s:e}\t{m*n:e}\t{(s*s+m*m)*n:e}\t{n}")
        L.append("")
    open(f"{d}/codelets/45/{sym}.tiny","w").write("\n".join(L)+"\n")
