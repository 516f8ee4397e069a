"""--dropout's masks written from docs/contracts.md section 1, for the PyTorch references:
element (token g, feature f) of site s at optimizer step t (1-based) is kept when word f % 4 of
Philox4x32-10(counter (f // 4, g mod 2^32, g // 2^32, s), key of (--seed, t)) is at least
floor(P * 2^32), and then scaled by 1 / (1 - P) (float32). The key is the 64-bit
mix64(seed ^ mix64(t + 0x64726f706f7574)) (splitmix64's finaliser), low word first.

numpy's uint64 holds a 32 x 32-bit product exactly; everything else is masked to 32 bits.
Run as a script: checks Philox against Random123's known-answer vectors.
"""
import math

import numpy as np
import torch

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def philox4x32_10(c, k):
    """c: four uint64 arrays of 32-bit words (broadcastable); k: two Python ints."""
    c = [np.asarray(w, dtype=np.uint64) for w in c]
    k0, k1 = k
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    mask, shift = np.uint64(M32), np.uint64(32)
    for r in range(10):
        if r > 0:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = m0 * c[0], m1 * c[2]
        c = [(p1 >> shift) ^ c[1] ^ np.uint64(k0), p1 & mask, (p0 >> shift) ^ c[3] ^ np.uint64(k1),
             p0 & mask]
    return c


def keep(seed, step, site, p, tokens, features):
    """Boolean array over broadcast(tokens, features) (int64 arrays): kept or not."""
    key = mix64(seed ^ mix64((step + 0x64726F706F7574) & M64))
    g = np.asarray(tokens, dtype=np.uint64)
    f = np.asarray(features, dtype=np.uint64)
    g, f = np.broadcast_arrays(g, f)
    words = philox4x32_10([f // np.uint64(4), g & np.uint64(M32), g >> np.uint64(32),
                           np.full(g.shape, site, dtype=np.uint64)], (key & M32, key >> 32))
    lane = (f % np.uint64(4)).astype(np.int64)
    word = np.choose(lane, words)
    threshold = min(M32, math.floor(float(np.float32(p)) * 4294967296.0))
    return word >= np.uint64(threshold)


def factor(seed, step, site, p, tokens, features):
    """The mask times 1 / (1 - P) as a float32 tensor: what multiplies the dropped tensor."""
    scale = np.float32(1.0) / (np.float32(1.0) - np.float32(p))
    kept = keep(seed, step, site, p, tokens, features)
    return torch.from_numpy(np.where(kept, scale, np.float32(0.0)).astype(np.float32))


def rows_factor(seed, step, site, p, first_sequence, B, T, C):
    """(B, T, C): the embedding's or a residual branch's mask of a microbatch whose first
    sequence in the global batch is first_sequence; token (first + b) * T + t, feature c."""
    tokens = ((first_sequence + np.arange(B))[:, None] * T + np.arange(T)[None, :])[:, :, None]
    return factor(seed, step, site, p, tokens, np.arange(C)[None, None, :])


def probs_factor(seed, step, site, p, first_sequence, B, H, T):
    """(B, H, T, T): the probabilities' mask; query token (first + b) * T + t, feature
    head * T + key position."""
    tokens = ((first_sequence + np.arange(B))[:, None] * T + np.arange(T)[None, :])
    features = np.arange(H)[:, None] * T + np.arange(T)[None, :]
    return factor(seed, step, site, p, tokens[:, None, :, None], features[None, :, None, :])


def self_check():
    kats = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
            ((M32, M32, M32, M32), (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
            ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
             (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, want in kats:
        got = tuple(int(w) for w in philox4x32_10(ctr, key))
        assert got == want, f"philox{ctr}: {got} != {want}"
    kept = keep(1, 1, 0, 0.3, np.arange(1000)[:, None], np.arange(64)[None, :])
    assert abs(1 - kept.mean() - 0.3) < 0.01, kept.mean()
    print("dropout_masks: Random123 known answers ok, drop rate", 1 - kept.mean())


if __name__ == "__main__":
    self_check()
