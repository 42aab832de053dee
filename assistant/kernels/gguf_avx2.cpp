// y = x W^T with W in a GGUF's own blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K) and x, y and the sums in
// float32, for AVX2 with FMA and F16C. Why, and what it measured: assistant/kernels/gguf_avx2.py.
//
// The blocks come regrouped by `gguf_avx2.repack`: each 8 outputs' blocks over the same inputs
// side by side, so that one 8-lane vector holds 8 outputs' weights at one input. Every output's sum is
// then one chain of FMAs, input by input in order, in its own lane: no horizontal sum, the activation
// broadcast, and the same sequence of operations whatever the number of rows and however they are
// tiled. So a row's result never depends on the other rows, and verifying a draft reproduces one-token
// steps bit for bit. A weight is dequantized as the GGUF reference (gguf-py, ggml) does, rounded once:
// Q4_0 d (q - 8), Q4_1 d q + m, Q5_0 d (q - 16), Q5_1 d q + m, Q4_K d sc q - dmin m, Q6_K d sc (q - 32),
// Q8_0 d q (each product is exact in float32); so `block_dequantize` gives back the float32 model
// converted from the GGUF, bit for bit.

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <utility>

namespace {

enum Kind { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q6_K = 14 };

inline __m256 halves(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m128i eight(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }

// A group: the blocks of 8 outputs over the same inputs, fields interleaved output by output, then
// the codes input by input, 8 outputs each: see gguf_avx2.repack. Per kind: inputs per block
// (BLOCK) and per scale (SUB), bytes per group's block, where the codes start, whether they are
// nibbles (input i and i + 16 of a 32-input sub-block in one byte) or signed bytes, where Q5's fifth
// bits are, and whether a weight has an offset: w = q s + o.
template <int K> struct Layout;
template <> struct Layout<Q4_0> {
    static constexpr int BLOCK = 32, SUB = 32, BYTES = 144, CODES = 16, HIGH = 0;
    static constexpr bool NIBBLES = true, OFFSET = true;
    static void scales(const uint8_t* b, int, __m256& s, __m256& o) { s = halves(b); o = _mm256_mul_ps(s, _mm256_set1_ps(-8)); }
};
template <> struct Layout<Q4_1> {
    static constexpr int BLOCK = 32, SUB = 32, BYTES = 160, CODES = 32, HIGH = 0;
    static constexpr bool NIBBLES = true, OFFSET = true;
    static void scales(const uint8_t* b, int, __m256& s, __m256& o) { s = halves(b); o = halves(b + 16); }
};
template <> struct Layout<Q5_0> {
    static constexpr int BLOCK = 32, SUB = 32, BYTES = 176, CODES = 48, HIGH = 16;
    static constexpr bool NIBBLES = true, OFFSET = true;
    static void scales(const uint8_t* b, int, __m256& s, __m256& o) { s = halves(b); o = _mm256_mul_ps(s, _mm256_set1_ps(-16)); }
};
template <> struct Layout<Q5_1> {
    static constexpr int BLOCK = 32, SUB = 32, BYTES = 192, CODES = 64, HIGH = 32;
    static constexpr bool NIBBLES = true, OFFSET = true;
    static void scales(const uint8_t* b, int, __m256& s, __m256& o) { s = halves(b); o = halves(b + 16); }
};
template <> struct Layout<Q8_0> {
    static constexpr int BLOCK = 32, SUB = 32, BYTES = 272, CODES = 16, HIGH = 0;
    static constexpr bool NIBBLES = false, OFFSET = false;
    static void scales(const uint8_t* b, int, __m256& s, __m256&) { s = halves(b); }
};
template <> struct Layout<Q4_K> {  // d sc q - dmin m, sc and m unpacked to bytes
    static constexpr int BLOCK = 256, SUB = 32, BYTES = 1184, CODES = 160, HIGH = 0;
    static constexpr bool NIBBLES = true, OFFSET = true;
    static void scales(const uint8_t* b, int u, __m256& s, __m256& o) {
        s = _mm256_mul_ps(halves(b), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(eight(b + 32 + 8 * u))));
        o = _mm256_xor_ps(_mm256_mul_ps(halves(b + 16), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(eight(b + 96 + 8 * u)))),
                          _mm256_set1_ps(-0.0f));
    }
};
template <> struct Layout<Q6_K> {  // d sc (q - 32), q - 32 stored as a signed byte
    static constexpr int BLOCK = 256, SUB = 16, BYTES = 2192, CODES = 144, HIGH = 0;
    static constexpr bool NIBBLES = false, OFFSET = false;
    static void scales(const uint8_t* b, int u, __m256& s, __m256&) {
        s = _mm256_mul_ps(halves(b), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight(b + 16 + 8 * u))));
    }
};

// The 8 outputs' weights at input I of sub-block u of the block at b.
template <class L, int I>
inline __m256 weight(const uint8_t* b, int u, __m256 s, __m256 o) {
    __m256i q;
    if (L::NIBBLES) {
        const uint8_t* p = b + L::CODES + 128 * u + 8 * (I % 16);
        if (I >= 16) asm("" : "+r"(p));  // the same bytes as input I - 16: load them again, or GCC
                                         // keeps 16 vectors alive across the sub-block and spills them
        const __m256i v = _mm256_cvtepu8_epi32(eight(p));
        q = I < 16 ? _mm256_and_si256(v, _mm256_set1_epi32(15)) : _mm256_srli_epi32(v, 4);
        if (L::HIGH)
            q = _mm256_or_si256(q, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + L::HIGH)), I), _mm256_set1_epi32(1)), 4));
    } else {
        q = _mm256_cvtepi8_epi32(eight(b + L::CODES + 8 * L::SUB * u + 8 * I));
    }
    const __m256 f = _mm256_cvtepi32_ps(q);
    return L::OFFSET ? _mm256_fmadd_ps(f, s, o) : _mm256_mul_ps(f, s);
}

constexpr int64_t FEW = 4;     // up to this many rows, weights dequantized in registers
constexpr int TALL = 6;        // then at most 6 rows by 2 groups: 12 sums, 2 weights and a broadcast
constexpr int WIDE = 2;        // in 15 of the 16 registers
constexpr int64_t SPAN = 256;  // inputs per panel: a panel and the rows' inputs stay in a 32 KB L1

// Up to FEW rows: R rows by G groups (8G outputs), dequantized in registers as the FMAs need them.
// The sums are locals and the steps inlined by force: as members of a struct, GCC 12 stored and
// reloaded every sum at every input (the 1.5B's Q4_K matrices, one row: 57 ms; so, 45; with the
// codes loaded again for the high nibbles, see `weight`, 44; three rows 115, 71).
template <class L, int R, int G>
__attribute__((noinline)) void tile(const uint8_t* groups, int64_t group_bytes, const float* x, int64_t k, float* y,
                                    int64_t n) {
    __m256 acc[R][G];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) acc[r][g] = _mm256_setzero_ps();
    for (int64_t blk = 0; blk < k / L::BLOCK; blk++) {
        const uint8_t* b[G];
        for (int g = 0; g < G; g++) b[g] = groups + g * group_bytes + blk * L::BYTES;
        for (int u = 0; u < L::BLOCK / L::SUB; u++) {
            __m256 s[G], o[G];
            for (int g = 0; g < G; g++) L::scales(b[g], u, s[g], o[g]);
            const float* xs = x + blk * L::BLOCK + u * L::SUB;
            [&]<int... I>(std::integer_sequence<int, I...>) __attribute__((always_inline)) {
                ([&]() __attribute__((always_inline)) {
                    __m256 w[G];
                    for (int g = 0; g < G; g++) w[g] = weight<L, I>(b[g], u, s[g], o[g]);
                    for (int r = 0; r < R; r++) {
                        const __m256 v = _mm256_broadcast_ss(xs + r * k + I);
                        for (int g = 0; g < G; g++) acc[r][g] = _mm256_fmadd_ps(w[g], v, acc[r][g]);
                    }
                }(), ...);
            }(std::make_integer_sequence<int, L::SUB>());
        }
    }
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) _mm256_storeu_ps(y + r * n + 8 * g, acc[r][g]);
}

// Calls use(first row, rows) over m rows in ceil(m / most) chunks as even as can be: a tile of few
// rows keeps too few sums in flight.
template <class Use>
inline void chunks(int64_t m, int64_t most, Use use) {
    const int64_t count = (m + most - 1) / most;
    for (int64_t c = 0, r = 0; c < count; c++) {
        const int64_t rows = m / count + (c < m % count);
        use(r, rows);
        r += rows;
    }
}

// More rows: G groups' weights over `span` inputs dequantized into `panel` [span][8G] once, then
// R rows by G groups of FMAs read them, each sum continued from y: the same weights and the same
// chains as `tile`. (Starting from y even at the first span, and the unroll pragmas, keep GCC 12 from
// storing every sum to the stack in every step, which halved the speed.)
template <int R, int G>
__attribute__((noinline)) void panel_tile(const float* panel, int64_t span, const float* x, int64_t k, float* y,
                                          int64_t n, bool fresh) {
    if (fresh)
        for (int r = 0; r < R; r++)
            for (int g = 0; g < G; g++) _mm256_storeu_ps(y + r * n + 8 * g, _mm256_setzero_ps());
    __m256 acc[R][G];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) acc[r][g] = _mm256_loadu_ps(y + r * n + 8 * g);
    for (int64_t i = 0; i < span; i++, panel += 8 * G) {
        __m256 w[G];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) w[g] = _mm256_load_ps(panel + 8 * g);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m256 v = _mm256_broadcast_ss(x + r * k + i);
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) acc[r][g] = _mm256_fmadd_ps(w[g], v, acc[r][g]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) _mm256_storeu_ps(y + r * n + 8 * g, acc[r][g]);
}

template <class L, int G>
inline void fill(const uint8_t* groups, int64_t group_bytes, int64_t first, int64_t last, float* panel) {
    for (int g = 0; g < G; g++)
        for (int64_t blk = first; blk < last; blk++) {
            const uint8_t* b = groups + g * group_bytes + blk * L::BYTES;
            for (int u = 0; u < L::BLOCK / L::SUB; u++) {
                __m256 s, o = _mm256_setzero_ps();
                L::scales(b, u, s, o);
                float* to = panel + ((blk - first) * L::BLOCK + u * L::SUB) * 8 * G + 8 * g;
                [&]<int... I>(std::integer_sequence<int, I...>) {
                    (_mm256_store_ps(to + I * 8 * G, weight<L, I>(b, u, s, o)), ...);
                }(std::make_integer_sequence<int, L::SUB>());
            }
        }
}

template <class L, int G>
inline void panel_rows(const uint8_t* groups, int64_t group_bytes, const float* x, int64_t m, int64_t k, float* y,
                       int64_t n, int64_t first, int64_t last, float* panel) {
    fill<L, G>(groups, group_bytes, first, last, panel);
    const int64_t span = (last - first) * L::BLOCK;
    const float* xs = x + first * L::BLOCK;
    const bool fresh = first == 0;
    chunks(m, TALL, [&](int64_t r, int64_t rows) {
        switch (rows) {
            case 1: return panel_tile<1, G>(panel, span, xs + r * k, k, y + r * n, n, fresh);
            case 2: return panel_tile<2, G>(panel, span, xs + r * k, k, y + r * n, n, fresh);
            case 3: return panel_tile<3, G>(panel, span, xs + r * k, k, y + r * n, n, fresh);
            case 4: return panel_tile<4, G>(panel, span, xs + r * k, k, y + r * n, n, fresh);
            case 5: return panel_tile<5, G>(panel, span, xs + r * k, k, y + r * n, n, fresh);
            case 6: return panel_tile<6, G>(panel, span, xs + r * k, k, y + r * n, n, fresh);
        }
    });
}

template <class L, int G>
void few(const float* x, int64_t m, int64_t k, const uint8_t* groups, int64_t n, float* y) {
    const int64_t group_bytes = k / L::BLOCK * L::BYTES;
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < n / 8; g += G) {
        const uint8_t* at = groups + g * group_bytes;
        chunks(m, FEW, [&](int64_t r, int64_t rows) {
            switch (rows) {
                case 1: return tile<L, 1, G>(at, group_bytes, x + r * k, k, y + r * n + 8 * g, n);
                case 2: return tile<L, 2, G>(at, group_bytes, x + r * k, k, y + r * n + 8 * g, n);
                case 3: return tile<L, 3, G>(at, group_bytes, x + r * k, k, y + r * n + 8 * g, n);
                case 4: return tile<L, 4, G>(at, group_bytes, x + r * k, k, y + r * n + 8 * g, n);
            }
        });
    }
}

template <class L>
void many(const float* x, int64_t m, int64_t k, const uint8_t* groups, int64_t n, float* y) {
    const int64_t group_bytes = k / L::BLOCK * L::BYTES, blocks = k / L::BLOCK, sets = n / (8 * WIDE);
    const int64_t span = (SPAN + L::BLOCK - 1) / L::BLOCK;
#pragma omp parallel
    {
        float* panel = static_cast<float*>(aligned_alloc(32, span * L::BLOCK * 8 * WIDE * sizeof(float)));
        for (int64_t first = 0; first < blocks; first += span) {
            const int64_t last = first + span < blocks ? first + span : blocks;
#pragma omp for schedule(static) nowait
            for (int64_t set = 0; set <= sets; set++) {
                const uint8_t* at = groups + set * WIDE * group_bytes;
                if (set < sets) panel_rows<L, WIDE>(at, group_bytes, x, m, k, y + 8 * WIDE * set, n, first, last, panel);
                else
                    for (int64_t g = sets * WIDE; g < n / 8; g++, at += group_bytes)
                        panel_rows<L, 1>(at, group_bytes, x, m, k, y + 8 * g, n, first, last, panel);
            }
        }
        free(panel);
    }
}

template <class L>
void dispatch(const float* x, int64_t m, int64_t k, const uint8_t* groups, int64_t n, float* y) {
    if (m > FEW) many<L>(x, m, k, groups, n, y);
    else if (m <= 2 && n % 32 == 0) few<L, 4>(x, m, k, groups, n, y);
    else if (n % 16 == 0) few<L, 2>(x, m, k, groups, n, y);
    else few<L, 1>(x, m, k, groups, n, y);
}

template <class L>
void dequantize(const uint8_t* groups, int64_t n, int64_t k, float* w) {
    const int64_t group_bytes = k / L::BLOCK * L::BYTES;
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < n / 8; g++) {
        float* out = w + 8 * g * k;
        auto keep = [&](int64_t at, __m256 v) {
            alignas(32) float lanes[8];
            _mm256_store_ps(lanes, v);
            for (int o = 0; o < 8; o++) out[o * k + at] = lanes[o];
        };
        for (int64_t blk = 0; blk < k / L::BLOCK; blk++) {
            const uint8_t* b = groups + g * group_bytes + blk * L::BYTES;
            for (int u = 0; u < L::BLOCK / L::SUB; u++) {
                __m256 s, o = _mm256_setzero_ps();
                L::scales(b, u, s, o);
                const int64_t at = blk * L::BLOCK + u * L::SUB;
                [&]<int... I>(std::integer_sequence<int, I...>) {
                    (keep(at + I, weight<L, I>(b, u, s, o)), ...);
                }(std::make_integer_sequence<int, L::SUB>());
            }
        }
    }
}

template <template <class> class F, class... A>
void by_kind(int kind, A... a) {
    switch (kind) {
        case Q4_0: return F<Layout<Q4_0>>::run(a...);
        case Q4_1: return F<Layout<Q4_1>>::run(a...);
        case Q5_0: return F<Layout<Q5_0>>::run(a...);
        case Q5_1: return F<Layout<Q5_1>>::run(a...);
        case Q8_0: return F<Layout<Q8_0>>::run(a...);
        case Q4_K: return F<Layout<Q4_K>>::run(a...);
        case Q6_K: return F<Layout<Q6_K>>::run(a...);
    }
}
template <class L> struct Product { static void run(const float* x, int64_t m, int64_t k, const uint8_t* g, int64_t n, float* y) { dispatch<L>(x, m, k, g, n, y); } };
template <class L> struct Dequantize { static void run(const uint8_t* g, int64_t n, int64_t k, float* w) { dequantize<L>(g, n, k, w); } };

}  // namespace

extern "C" {

// x [m, k], groups of `kind` for n outputs (n a multiple of 8; see gguf_avx2.repack), y [m, n].
void block_linear(const float* x, int64_t m, int64_t k, const uint8_t* groups, int64_t n, int kind, float* y) {
    by_kind<Product>(kind, x, m, k, groups, n, y);
}

// w [n, k] float32: the weights the groups hold.
void block_dequantize(const uint8_t* groups, int64_t n, int64_t k, int kind, float* w) {
    by_kind<Dequantize>(kind, groups, n, k, w);
}
}
