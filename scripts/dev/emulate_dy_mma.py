#!/usr/bin/env python3
"""numpy emulation of lora.cu lora_dy_mma_kernel (v2) data movement for one warp step: the staged, XOR-swizzled
chunks, ldmatrix / ldmatrix.trans row addresses and mma.m16n8k16 fragments; checks g = dy b and db = dy^T xa and that
the ldmatrix rows are free of bank conflicts. Development only: python3 scripts/dev/emulate_dy_mma.py"""
# Emulates lora_dy_mma_kernel v2's data movement for one warp-step (16 rows x 256 cols) with numpy.
import numpy as np
rng = np.random.default_rng(0)
R=16; C=256
dy = rng.standard_normal((R, C)).astype(np.float32)
b = rng.standard_normal((C, 8)).astype(np.float32)
xa = rng.standard_normal((R, 8)).astype(np.float32)
kChunkCols=64; kPieces=8
# stage: [row][piece] each piece = 8 consecutive columns
def run():
    cg = np.zeros((32,4)); cdb = np.zeros((16,32,4))
    for chunk in range(4):
        stage = np.zeros((16, kPieces, 8), np.float32)
        for lane in range(32):
            for i in range(4):
                p = lane + 32*i; row = p // kPieces; piece = p % kPieces
                col = chunk*kChunkCols + 8*piece
                stage[row, piece ^ (row % 8)] = dy[row, col:col+8]
        for kt in range(4):
            t = chunk*4 + kt
            # ldmatrix: lane provides address of row mrow, logical piece 2kt+mhalf
            addr = {}
            for lane in range(32):
                mrow = (lane & 7) + ((lane >> 3) & 1)*8; mhalf = lane >> 4
                addr[lane] = stage[mrow, (2*kt+mhalf) ^ (mrow % 8)]  # 8 elements = one matrix row
            # matrix i rows = addresses of lanes 8i..8i+7
            mats = [np.stack([addr[8*i + r] for r in range(8)]) for i in range(4)]  # each 8x8
            a = np.zeros((32,4,2)); tr = np.zeros((32,4,2))
            for lane in range(32):
                g, tid = lane//4, lane%4
                for i in range(4):
                    a[lane,i] = mats[i][g, 2*tid:2*tid+2]
                    tr[lane,i] = mats[i].T[g, 2*tid:2*tid+2]
            at = tr[:, [0,2,1,3]]
            # sbg fragments for g: reg0 = b[c0+16t+2tid+{0,1}][gid], reg1 = +8
            def mma(c, afr, b0, b1):
                # reconstruct A (16x16) and B (16x8) from fragments, then C += A B
                A = np.zeros((16,16)); B = np.zeros((16,8))
                for lane in range(32):
                    g, tid = lane//4, lane%4
                    A[g, 2*tid:2*tid+2] = afr[lane,0]; A[g+8, 2*tid:2*tid+2] = afr[lane,1]
                    A[g, 2*tid+8:2*tid+10] = afr[lane,2]; A[g+8, 2*tid+8:2*tid+10] = afr[lane,3]
                    B[2*tid:2*tid+2, g] = b0[lane]; B[2*tid+8:2*tid+10, g] = b1[lane]
                D = A @ B
                for lane in range(32):
                    g, tid = lane//4, lane%4
                    c[lane] += [D[g,2*tid], D[g,2*tid+1], D[g+8,2*tid], D[g+8,2*tid+1]]
            bg0 = np.array([[b[16*t+2*(l%4), l//4], b[16*t+2*(l%4)+1, l//4]] for l in range(32)])
            bg1 = np.array([[b[16*t+2*(l%4)+8, l//4], b[16*t+2*(l%4)+9, l//4]] for l in range(32)])
            mma(cg, a, bg0, bg1)
            xb0 = np.array([[xa[2*(l%4), l//4], xa[2*(l%4)+1, l//4]] for l in range(32)])
            xb1 = np.array([[xa[2*(l%4)+8, l//4], xa[2*(l%4)+9, l//4]] for l in range(32)])
            mma(cdb[t], at, xb0, xb1)
    G = np.zeros((16,8)); DB = np.zeros((256,8))
    for lane in range(32):
        g, tid = lane//4, lane%4
        G[g, 2*tid:2*tid+2] = cg[lane,:2]; G[g+8, 2*tid:2*tid+2] = cg[lane,2:]
        for t in range(16):
            DB[16*t+g, 2*tid:2*tid+2] = cdb[t][lane,:2]; DB[16*t+g+8, 2*tid:2*tid+2] = cdb[t][lane,2:]
    return G, DB
G, DB = run()
print("g err", np.abs(G - dy @ b).max(), "db err", np.abs(DB - dy.T @ xa).max())
# bank check of ldmatrix addresses: for each matrix, 8 row addresses -> bank groups of 16B within 128B rows
for kt in range(4):
    for i in range(4):
        banks = set()
        for r in range(8):
            lane = 8*i + r
            mrow = (lane & 7) + ((lane >> 3) & 1)*8; mhalf = lane >> 4
            phys = (2*kt+mhalf) ^ (mrow % 8)
            banks.add(phys)  # 16B slot within a 128B row (row stride 128B = 32 banks)
        assert len(banks) == 8, (kt, i, banks)
print("ldmatrix rows conflict-free")
