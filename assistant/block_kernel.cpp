// y = x W^T with W in a GGUF's own blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K) and x, y and the sums in
// float32, for AVX2 with FMA and F16C. Why, and what it measured: assistant/block_kernel.py.
//
// Each output y[m, n] is the same sequence of operations whatever the number of rows and however
// they are tiled: the weights in the order the blocks store them, 8 at a time, alternately into two
// 8-lane sums (two chains of FMAs in flight), which are added and then summed across lanes in a
// fixed order. So a row's result never depends on the other rows, and verifying a draft reproduces
// one-token steps bit for bit. A weight is dequantized as the GGUF reference (gguf-py, ggml) does,
// rounded once: Q4_0 d (q - 8), Q4_1 d q + m, Q5_0 d (q - 16), Q5_1 d q + m,
// Q4_K d sc q - dmin m, Q6_K d sc (q - 32), Q8_0 d q; so `block_dequantize` gives back the float32 model converted from the GGUF, bit for bit.

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

namespace {

enum Kind { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q6_K = 14 };  // GGML's type numbers

inline float half(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

inline __m256i bytes8(const uint8_t* p, bool sign) {  // 8 bytes widened to 8 int32 lanes
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return sign ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
}

// Each walks one output's row of blocks and hands `use` every 8 consecutive weights as floats, in the
// blocks' own order, with the index of the first and which of two sums takes them: two chains of
// additions in flight, as one waits 4 cycles for each FMA.
template <class Use>
inline void walk_q4_k(const uint8_t* row, int64_t k, Use& use) {
    const __m256i low = _mm256_set1_epi32(0xF);
    for (int64_t at = 0; at < k; at += 256, row += 144) {
        const float d = half(row), dmin = half(row + 2);
        const uint8_t *s = row + 4, *q = row + 16;
        for (int j = 0; j < 4; j++) {  // 64 weights: sub-block 2j in the low nibbles, 2j+1 in the high
            int sc[2], mn[2];
            for (int h = 0; h < 2; h++) {
                const int i = 2 * j + h;
                sc[h] = i < 4 ? s[i] & 63 : (s[i + 4] & 0xF) | ((s[i - 4] >> 6) << 4);
                mn[h] = i < 4 ? s[i + 4] & 63 : (s[i + 4] >> 4) | ((s[i] >> 6) << 4);
            }
            const __m256 s0 = _mm256_set1_ps(d * sc[0]), o0 = _mm256_set1_ps(-(dmin * mn[0]));
            const __m256 s1 = _mm256_set1_ps(d * sc[1]), o1 = _mm256_set1_ps(-(dmin * mn[1]));
            for (int i = 0; i < 32; i += 8) {
                const __m256i c = bytes8(q + 32 * j + i, false);
                use(_mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(c, low)), s0, o0), at + 64 * j + i, 0);
                use(_mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(c, 4)), s1, o1), at + 64 * j + 32 + i, 1);
            }
        }
    }
}

template <class Use>
inline void walk_q6_k(const uint8_t* row, int64_t k, Use& use) {
    const __m256i low = _mm256_set1_epi32(0xF), two = _mm256_set1_epi32(3);
    for (int64_t at = 0; at < k; at += 256, row += 210) {
        const float d = half(row + 208);
        const int8_t* sc = reinterpret_cast<const int8_t*>(row + 192);
        for (int n = 0; n < 2; n++) {  // 128 weights: low bits in ql, high bits in qh
            const uint8_t *ql = row + 64 * n, *qh = row + 128 + 32 * n;
            for (int l = 0; l < 32; l += 8) {
                const int is = 8 * n + l / 16;
                const __m256i a = bytes8(ql + l, false), b = bytes8(ql + 32 + l, false), h = bytes8(qh + l, false);
                const __m256i q0 = _mm256_or_si256(_mm256_and_si256(a, low), _mm256_slli_epi32(_mm256_and_si256(h, two), 4));
                const __m256i q1 = _mm256_or_si256(_mm256_and_si256(b, low),
                                                   _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2), two), 4));
                const __m256i q2 = _mm256_or_si256(_mm256_srli_epi32(a, 4),
                                                   _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 4), two), 4));
                const __m256i q3 = _mm256_or_si256(_mm256_srli_epi32(b, 4), _mm256_slli_epi32(_mm256_srli_epi32(h, 6), 4));
                auto scaled = [&](__m256i q, int p) {  // (q - 32) s, rounded once as q s - 32 s
                    const float s = d * sc[is + 2 * p];
                    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(s), _mm256_set1_ps(-32 * s));
                };
                const int64_t to = at + 128 * n + l;
                use(scaled(q0, 0), to, 0);  // the chains as literals: an indexed one would live in memory
                use(scaled(q1, 1), to + 32, 1);
                use(scaled(q2, 2), to + 64, 0);
                use(scaled(q3, 3), to + 96, 1);
            }
        }
    }
}

template <class Use>
inline void walk_q4(const uint8_t* row, int64_t k, bool with_min, Use& use) {  // Q4_0: d (q - 8), Q4_1: d q + m
    const __m256i low = _mm256_set1_epi32(0xF);
    const int64_t size = with_min ? 20 : 18;
    for (int64_t at = 0; at < k; at += 32, row += size) {
        const float d = half(row);
        const __m256 s = _mm256_set1_ps(d), o = _mm256_set1_ps(with_min ? half(row + 2) : -8 * d);
        const uint8_t* q = row + size - 16;  // element i in the low nibble of byte i, 16 + i in the high
        for (int i = 0; i < 16; i += 8) {
            const __m256i c = bytes8(q + i, false);
            use(_mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(c, low)), s, o), at + i, 0);
            use(_mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(c, 4)), s, o), at + 16 + i, 1);
        }
    }
}

template <class Use>
inline void walk_q5(const uint8_t* row, int64_t k, bool with_min, Use& use) {  // Q5_0: d (q - 16), Q5_1: d q + m
    const __m256i low = _mm256_set1_epi32(0xF), one = _mm256_set1_epi32(1), lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int64_t size = with_min ? 24 : 22;
    for (int64_t at = 0; at < k; at += 32, row += size) {
        const float d = half(row);
        const __m256 s = _mm256_set1_ps(d), o = _mm256_set1_ps(with_min ? half(row + 2) : -16 * d);
        uint32_t bits;  // bit i: the fifth bit of element i
        memcpy(&bits, row + size - 20, 4);
        const __m256i high = _mm256_set1_epi32(static_cast<int>(bits));
        const uint8_t* q = row + size - 16;
        for (int i = 0; i < 16; i += 8) {
            const __m256i c = bytes8(q + i, false);
            const __m256i at_i = _mm256_add_epi32(lanes, _mm256_set1_epi32(i));
            const __m256i b0 = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(high, at_i), one), 4);
            const __m256i b1 = _mm256_slli_epi32(
                _mm256_and_si256(_mm256_srlv_epi32(high, _mm256_add_epi32(at_i, _mm256_set1_epi32(16))), one), 4);
            use(_mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_or_si256(_mm256_and_si256(c, low), b0)), s, o), at + i, 0);
            use(_mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_or_si256(_mm256_srli_epi32(c, 4), b1)), s, o), at + 16 + i, 1);
        }
    }
}

template <class Use>
inline void walk_q8_0(const uint8_t* row, int64_t k, Use& use) {
    for (int64_t at = 0; at < k; at += 32, row += 34) {
        const __m256 d = _mm256_set1_ps(half(row));
        for (int i = 0; i < 32; i += 16) {
            use(_mm256_mul_ps(_mm256_cvtepi32_ps(bytes8(row + 2 + i, true)), d), at + i, 0);
            use(_mm256_mul_ps(_mm256_cvtepi32_ps(bytes8(row + 10 + i, true)), d), at + i + 8, 1);
        }
    }
}

template <class Use>
inline void walk(int kind, const uint8_t* row, int64_t k, Use& use) {
    if (kind == Q4_K) walk_q4_k(row, k, use);
    else if (kind == Q6_K) walk_q6_k(row, k, use);
    else if (kind == Q8_0) walk_q8_0(row, k, use);
    else if (kind == Q5_0 || kind == Q5_1) walk_q5(row, k, kind == Q5_1, use);
    else walk_q4(row, k, kind == Q4_1, use);
}

inline float sum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

template <int R>
struct Rows {  // R rows of x against one output's weights, dequantized in registers
    const float* x;
    int64_t k;
    __m256 acc[2][R];
    inline void operator()(__m256 w, int64_t at, int chain) {
        for (int r = 0; r < R; r++)
            acc[chain][r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * k + at), w, acc[chain][r]);
    }
};

template <int R>
void few(int kind, const float* x, int64_t k, const uint8_t* blocks, int64_t n, int64_t row_bytes, float* y) {
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; j++) {
        Rows<R> use{x, k, {}};
        for (int r = 0; r < R; r++) use.acc[0][r] = use.acc[1][r] = _mm256_setzero_ps();
        walk(kind, blocks + j * row_bytes, k, use);
        for (int r = 0; r < R; r++) y[r * n + j] = sum8(_mm256_add_ps(use.acc[0][r], use.acc[1][r]));
    }
}

// R rows by C outputs over `span` weights of a panel (dequantized, `k` apart) and of x permuted into
// the same order (the blocks' walk), carrying the sums in `sums` [2][R][C] between spans: the sums
// are those of `Rows`, term for term.
template <int R, int C>
inline void tile(const float* x, int64_t k, const float* w, int64_t span, __m256* sums, float* y, int64_t n,
                 bool first, bool last) {
    __m256 acc[2][R][C];
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) acc[h][r][c] = first ? _mm256_setzero_ps() : sums[(h * R + r) * C + c];
    for (int64_t at = 0; at < span; at += 16) {
        for (int h = 0; h < 2; h++) {
            __m256 ws[C];
            for (int c = 0; c < C; c++) ws[c] = _mm256_load_ps(w + c * k + at + 8 * h);
            for (int r = 0; r < R; r++) {
                const __m256 xs = _mm256_load_ps(x + r * k + at + 8 * h);
                for (int c = 0; c < C; c++) acc[h][r][c] = _mm256_fmadd_ps(xs, ws[c], acc[h][r][c]);
            }
        }
    }
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) sums[(h * R + r) * C + c] = acc[h][r][c];
    if (last)
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) y[r * n + c] = sum8(_mm256_add_ps(acc[0][r][c], acc[1][r][c]));
}

template <int R>
inline void tiles(const float* x, int64_t k, const float* w, int64_t outputs, int64_t span, __m256* sums, float* y,
                  int64_t n, bool first, bool last) {
    int64_t c = 0;
    for (; c + 2 <= outputs; c += 2, sums += 2 * R * 2) tile<R, 2>(x, k, w + c * k, span, sums, y + c, n, first, last);
    if (outputs - c == 1) tile<R, 1>(x, k, w + c * k, span, sums, y + c, n, first, last);
}

constexpr int64_t PANEL = 6;   // outputs dequantized together: 6 x 8960 floats stay in a 512 KB L2
constexpr int64_t ROWS = 33;   // rows of x per pass over a panel
constexpr int64_t SPAN = 256;  // weights per pass: a panel's and the rows' stay in a 32 KB L1

}  // namespace

extern "C" {

// x [m, k], blocks [n, row_bytes] of `kind`, y [m, n]; k a multiple of the kind's block.
void block_linear(const float* x, int64_t m, int64_t k, const uint8_t* blocks, int64_t n, int64_t row_bytes,
                  int kind, float* y) {
    switch (m) {  // a few rows: each output's blocks dequantized once, in registers
        case 1: return few<1>(kind, x, k, blocks, n, row_bytes, y);
        case 2: return few<2>(kind, x, k, blocks, n, row_bytes, y);
        case 3: return few<3>(kind, x, k, blocks, n, row_bytes, y);
        case 4: return few<4>(kind, x, k, blocks, n, row_bytes, y);
    }
    std::vector<int64_t> order;  // where the blocks' walk takes each 8 weights from
    auto note = [&order](__m256, int64_t at, int) { order.push_back(at); };
    walk(kind, blocks, k, note);
    float* xs = static_cast<float*>(aligned_alloc(32, m * k * sizeof(float)));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < m; r++)
        for (size_t s = 0; s < order.size(); s++) memcpy(xs + r * k + 8 * s, x + r * k + order[s], 8 * sizeof(float));
#pragma omp parallel
    {
        float* panel = static_cast<float*>(aligned_alloc(32, PANEL * k * sizeof(float)));
        __m256* sums = static_cast<__m256*>(aligned_alloc(32, 2 * ROWS * PANEL * sizeof(__m256)));
#pragma omp for schedule(static)
        for (int64_t first = 0; first < n; first += PANEL) {
            const int64_t outputs = first + PANEL < n ? PANEL : n - first;
            for (int64_t c = 0; c < outputs; c++) {
                float* to = panel + c * k;
                auto store = [to](__m256 v, int64_t, int) mutable { _mm256_store_ps(to, v); to += 8; };
                walk(kind, blocks + (first + c) * row_bytes, k, store);
            }
            for (int64_t top = 0; top < m; top += ROWS) {
                const int64_t bottom = top + ROWS < m ? top + ROWS : m;
                for (int64_t at = 0; at < k; at += SPAN) {
                    const int64_t span = at + SPAN < k ? SPAN : k - at;
                    int64_t r = top;
                    for (; r + 3 <= bottom; r += 3)
                        tiles<3>(xs + r * k + at, k, panel + at, outputs, span, sums + 2 * (r - top) * PANEL,
                                 y + r * n + first, n, at == 0, at + span == k);
                    if (bottom - r == 2)
                        tiles<2>(xs + r * k + at, k, panel + at, outputs, span, sums + 2 * (r - top) * PANEL,
                                 y + r * n + first, n, at == 0, at + span == k);
                    if (bottom - r == 1)
                        tiles<1>(xs + r * k + at, k, panel + at, outputs, span, sums + 2 * (r - top) * PANEL,
                                 y + r * n + first, n, at == 0, at + span == k);
                }
            }
        }
        free(sums);
        free(panel);
    }
    free(xs);
}

// w [n, k] float32: the blocks dequantized, for large batches (through a float32 matrix product) and tests.
void block_dequantize(const uint8_t* blocks, int64_t n, int64_t row_bytes, int64_t k, int kind, float* w) {
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; j++) {
        float* out = w + j * k;
        auto store = [out](__m256 v, int64_t at, int) { _mm256_storeu_ps(out + at, v); };
        walk(kind, blocks + j * row_bytes, k, store);
    }
}

}
