// Reachability kernels for Backend::Cuda (crates/kernels/src/cuda.rs), compiled at run time with NVRTC.
//
// The level fills do on the device what crates/kernels/src/levels.rs does on the CPU: rows are stored in
// level order (every successor of a node lies in an earlier level), so one launch fills one wide level (or
// one block a run of narrow ones), each thread one entry of one row, reading only rows that are already
// filled. Consecutive threads take consecutive entries of a row, so a successor's row is read coalesced.
//
// square_rows is Cobra's closure (§5): repeated boolean squaring of the bit-packed adjacency matrix,
// kept as the baseline the level fills are measured against.

typedef unsigned int u32;
typedef unsigned long long u64;

// Chain clocks: entry (r, c) is the first position on chain c that the node of rank r reaches, the
// minimum over its successors' entries and, on its own chain, its own position.
__device__ __forceinline__ void clock_entry(u32* rows, const u64* succ_start, const u32* succ_rank,
                                            const u32* own_chain, const u32* own_pos, u32 r, u32 c,
                                            u32 width) {
    u32 best = own_chain[r] == c ? own_pos[r] : 0xffffffffu;
    for (u64 e = succ_start[r]; e < succ_start[r + 1]; ++e) {
        const u32 theirs = rows[(u64)succ_rank[e] * width + c];
        best = theirs < best ? theirs : best;
    }
    rows[(u64)r * width + c] = best;
}

// Bitset rows: word w of the row of rank r is the OR of its successors' words, plus the node's own bit.
__device__ __forceinline__ void bit_entry(u64* rows, const u64* succ_start, const u32* succ_rank,
                                          const u32* node_of_rank, u32 r, u32 w, u32 words) {
    const u32 node = node_of_rank[r];
    u64 acc = node / 64 == w ? 1ull << (node % 64) : 0ull;
    for (u64 e = succ_start[r]; e < succ_start[r + 1]; ++e) {
        acc |= rows[(u64)succ_rank[e] * words + w];
    }
    rows[(u64)r * words + w] = acc;
}

// One wide level, ranks [lo, lo + count), over the whole grid.
extern "C" __global__ void fill_clock_level(u32* rows, const u64* succ_start, const u32* succ_rank,
                                            const u32* own_chain, const u32* own_pos, u32 lo, u32 count,
                                            u32 width) {
    const u64 total = (u64)count * width;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        clock_entry(rows, succ_start, succ_rank, own_chain, own_pos, lo + (u32)(i / width), (u32)(i % width),
                    width);
    }
}

extern "C" __global__ void fill_bit_level(u64* rows, const u64* succ_start, const u32* succ_rank,
                                          const u32* node_of_rank, u32 lo, u32 count, u32 words) {
    const u64 total = (u64)count * words;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        bit_entry(rows, succ_start, succ_rank, node_of_rank, lo + (u32)(i / words), (u32)(i % words), words);
    }
}

// A run of narrow levels [first, last) in one block, a barrier between levels: histories are deep (a
// level per few transactions), and a launch per narrow level would cost more than its work. A block's
// global writes are visible to its own threads after __syncthreads.
extern "C" __global__ void fill_clock_levels_in_one_block(u32* rows, const u64* succ_start,
                                                          const u32* succ_rank, const u32* own_chain,
                                                          const u32* own_pos, const u32* level_starts,
                                                          u32 first, u32 last, u32 width) {
    for (u32 l = first; l < last; ++l) {
        const u32 lo = level_starts[l];
        const u64 total = (u64)(level_starts[l + 1] - lo) * width;
        for (u64 i = threadIdx.x; i < total; i += blockDim.x) {
            clock_entry(rows, succ_start, succ_rank, own_chain, own_pos, lo + (u32)(i / width),
                        (u32)(i % width), width);
        }
        __syncthreads();
    }
}

extern "C" __global__ void fill_bit_levels_in_one_block(u64* rows, const u64* succ_start,
                                                        const u32* succ_rank, const u32* node_of_rank,
                                                        const u32* level_starts, u32 first, u32 last,
                                                        u32 words) {
    for (u32 l = first; l < last; ++l) {
        const u32 lo = level_starts[l];
        const u64 total = (u64)(level_starts[l + 1] - lo) * words;
        for (u64 i = threadIdx.x; i < total; i += blockDim.x) {
            bit_entry(rows, succ_start, succ_rank, node_of_rank, lo + (u32)(i / words), (u32)(i % words),
                      words);
        }
        __syncthreads();
    }
}

// One squaring step (Cobra §5): out[i] = OR of in[k] over every k set in in[i]. Rows are indexed by node;
// every row already holds its own bit, so a row only grows, and *changed says whether any did. One block
// per row (grid-stride), the row kept in shared memory while its threads walk its set bits.
extern "C" __global__ void square_rows(const u64* in, u64* out, u32 n, u32 words, u32* changed) {
    extern __shared__ u64 row[];
    for (u32 i = blockIdx.x; i < n; i += gridDim.x) {
        for (u32 w = threadIdx.x; w < words; w += blockDim.x) {
            row[w] = in[(u64)i * words + w];
        }
        __syncthreads();
        for (u32 w = threadIdx.x; w < words; w += blockDim.x) {
            u64 acc = row[w];
            for (u32 kw = 0; kw < words; ++kw) {
                u64 bits = row[kw];
                while (bits != 0ull) {
                    const u32 k = kw * 64 + (u32)(__ffsll((long long)bits) - 1);
                    bits &= bits - 1;
                    acc |= in[(u64)k * words + w];
                }
            }
            out[(u64)i * words + w] = acc;
            if (acc != row[w]) {
                *changed = 1u;
            }
        }
        __syncthreads();
    }
}
