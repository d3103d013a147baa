# Writes hand-made numasim test platforms following docs/interfaces.md §2.
import sys
def node(name, rank, ncpu=4, gpus=((0,0),), nnuma=2):
    L=[f'  <zone id="{name}" routing="Floyd">',
       f'   <prop id="machine" value="tiny"/><prop id="rank" value="{rank}"/>']
    def host(hid, speed, props):
        p="".join(f'<prop id="{k}" value="{v}"/>' for k,v in props)
        L.append(f'   <host id="{name}.{hid}" speed="{speed}">{p}<prop id="node" value="{name}"/></host>')
    per=ncpu//nnuma
    for i in range(ncpu):
        host(f"cpu{i}","10Gf",[("kind","cpu"),("numa",i//per),("index",i)])
    for j,k in gpus:
        host(f"gpu{j}","100Gf",[("kind","gpu"),("numa",k),("index",j),("memory",str(12*1024**3))])
    for k in range(nnuma):
        host(f"ram{k}","1f",[("kind","ram"),("numa",k),("memory",str(64*1024**3))])
    host("nic0","1f",[("kind","nic"),("numa",0),("index",0)])
    for k in range(nnuma):
        L.append(f'   <router id="{name}.socket{k}"/>')
    for k in range(nnuma):
        L.append(f'   <link id="{name}.membus{k}" bandwidth="40GBps" latency="80ns"/>')
    if nnuma>1: L.append(f'   <link id="{name}.qpi" bandwidth="19.2GBps" latency="100ns"/>')
    for j,k in gpus: L.append(f'   <link id="{name}.pcie{j}" bandwidth="10GBps" latency="10us"/>')
    L.append(f'   <link id="{name}.nicpcie0" bandwidth="8GBps" latency="1us"/>')
    for i in range(ncpu): L.append(f'   <link id="{name}.core{i}" bandwidth="15GBps" latency="10ns"/>')
    def route(a,b,l): L.append(f'   <route src="{name}.{a}" dst="{name}.{b}"><link_ctn id="{name}.{l}"/></route>')
    for k in range(nnuma): route(f"ram{k}",f"socket{k}",f"membus{k}")
    for a in range(nnuma):
        for b in range(a+1,nnuma): route(f"socket{a}",f"socket{b}","qpi")
    for j,k in gpus: route(f"gpu{j}",f"socket{k}",f"pcie{j}")
    route("nic0","socket0","nicpcie0")
    for i in range(ncpu): route(f"cpu{i}",f"socket{i//per}",f"core{i}")
    L.append('  </zone>')
    return L
def platform(names, cluster="c", ncpu=4, nnuma=2):
    L=['<?xml version="1.0"?>','<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
       '<platform version="4.1">',f' <zone id="{cluster}" routing="Full">']
    for r,n in enumerate(names): L+=node(n,r,ncpu,nnuma=nnuma)
    for n in names: L.append(f'  <link id="{n}.eth" bandwidth="1.25GBps" latency="50us"/>')
    L.append(f'  <link id="{cluster}.switch" bandwidth="100GBps" latency="1us" sharing_policy="FATPIPE"/>')
    for a in names:
        for b in names:
            if a<b:
                L.append(f'  <zoneRoute src="{a}" dst="{b}" gw_src="{a}.nic0" gw_dst="{b}.nic0"><link_ctn id="{a}.eth"/><link_ctn id="{cluster}.switch"/><link_ctn id="{b}.eth"/></zoneRoute>')
    L+=[' </zone>','</platform>']
    return "\n".join(L)+"\n"
d=sys.argv[1]
open(f"{d}/tiny1.xml","w").write(platform(["n1"]))
open(f"{d}/tiny2.xml","w").write(platform(["n1","n2"]))
# more workers on one node than any fixed-size scheduler table held (dmda had 256)
open(f"{d}/wide1.xml","w").write(platform(["n1"], ncpu=300))
# four NUMA nodes (two cores each): the highest node index numasim tracks per operand
open(f"{d}/quad1.xml","w").write(platform(["n1"], ncpu=8, nnuma=4))
open(f"{d}/tiny5.xml","w").write(platform(["n1","n2","n3","n4","n5"]))  # a bag of 4 receivers: NewMadeleine trees
