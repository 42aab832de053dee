// Attention of the few queries of a one-token step or a verification over a KV cache, each row computed
// alone (`attention.py` says why and what it measured).
//
// A query row i of a step of q queries over k cached keys sees the first n = k - q + 1 + i keys. Its
// scores, softmax and weighted sum of values are a fixed sequence of operations over those n keys
// alone: which other rows come with it, and how many keys lie past n, change nothing. So a verified
// draft's rows have the bits of the one-token steps that plain decoding would take.
// - score j: the query (times the scale) by key j in 8-float chunks, one chain of FMAs per key, its 8
//   lanes summed by the same tree whichever 4 keys come with it (`lane_sums`).
// - softmax: exp(score - max) by one polynomial for every lane, summed in 8 lanes over blocks of 8 keys
//   then by a fixed tree; the weighted sum runs over the keys in order, and is divided by the sum last.
// AVX2 and FMA: every CPU the project runs on has them (Zen 3 has no AVX512, and AVX512 gives 2 cores
// of Zen 4 no more FMAs a cycle; on the Xeon it could double a verification's arithmetic: not tried).
//
// Built with AVX512-BF16 (`Halves`), a head of whole chunks of 32 values runs in bfloat16: the keys and
// values rounded to bfloat16 (to nearest even), the scaled query and the probabilities too, multiplied in
// pairs by VDPBF16PS into float32 lanes, twice the products a cycle of float32 FMAs on Zen 4. The engine's
// cache holds them rounded once, where they are stored (half the bytes); a float32 cache (transformers'
// own, as `hf-pld` runs it) has its keys rounded once for all rows and its values a block at a time, the
// same bits. A row's operations are still its own and fixed: its scores by one chain of pairs per key,
// summed by one tree; its probabilities summed rounded; its values weighed in pairs of keys (an odd count's
// last pair weighs its second by a zero probability). Rows score the keys in blocks whose queries stay in
// L1. Otherwise (float32 builds, heads of 8 or 16 values) the cache is float32.
//
// Loads: rows share what they load. SCORED rows take each chunk of 4 keys once, WEIGHED rows each
// chunk of a value, held in a register (GCC otherwise folds the one load into every FMA as its memory
// operand and nothing is shared). A step's keys are fetched into L2 AHEAD of the scoring and each
// block's values during the block before. Every row's operations stay its own, in the same order.
// The measurements behind these choices: docs/kernels.md.

#include <immintrin.h>
#include <omp.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

namespace {

constexpr int64_t BLOCK = 64;  // keys whose values stay in L1 while every row of a task sums them
constexpr int SCORED = 3;  // rows scored together: 12 sums of 4 keys, 3 queries' chunks and a key's in AVX2's 16 registers
constexpr int WEIGHED = 3;  // rows weighing values together: 12 sums, 3 weights and a value's chunk
constexpr int AHEAD = 32;  // keys fetched into L2 ahead of the scoring (a step's come from memory)

inline __m256 exp_nonpositive(__m256 x) {  // e^x for x <= 0 (Cephes' expf); below -87.3, about 1e-38
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}

inline __m128 lane_sums(const __m256* a) {  // lane t: the sum of a[t]'s lanes, ((0+1)+(2+3))+((4+5)+(6+7))
    const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

template <class V>
inline V in_register(V v) {  // v loaded once for several FMAs, not folded into each as an operand
    asm("" : "+v"(v));
    return v;
}

// The scores of R rows (queries at q, D = C * 8 floats apart, already scaled) by 4 keys, into to (rows
// `width` floats apart): each key's chunks loaded once for the R rows.
template <int C, int R>
inline void score_rows(const float* q, const float* const* key, float* to, int64_t width) {
    __m256 acc[R][4];
    auto chunk = [&](int c, auto product) {
        __m256 part[R];
        for (int i = 0; i < R; ++i) part[i] = _mm256_loadu_ps(q + i * C * 8 + c * 8);
        for (int t = 0; t < 4; ++t) {
            const __m256 k = in_register(_mm256_loadu_ps(key[t] + c * 8));
            for (int i = 0; i < R; ++i) acc[i][t] = product(part[i], k, acc[i][t]);
        }
    };
    chunk(0, [](__m256 a, __m256 b, __m256) { return _mm256_mul_ps(a, b); });
    for (int c = 1; c < C; ++c) chunk(c, [](__m256 a, __m256 b, __m256 sum) { return _mm256_fmadd_ps(a, b, sum); });
    for (int i = 0; i < R; ++i) _mm_storeu_ps(to + i * width, lane_sums(acc[i]));
}

// R rows' weighted sums of the values of keys j0.. added to their results out[i]: row i weighs keys
// j0..end[i] - 1 (ends ascending) by p + i * width; each value's chunk loaded once for the rows that see it.
template <int C, int R>
inline void weigh_rows(const float* p, int64_t width, const float* values, int64_t j0, const int64_t* end, float* const* out) {
    constexpr int D = C * 8, W = C < 4 ? C : 4;  // chunks at a time
    for (int c0 = 0; c0 < C; c0 += W) {
        __m256 acc[R][W];
        for (int i = 0; i < R; ++i)
            for (int c = 0; c < W; ++c) acc[i][c] = _mm256_loadu_ps(out[i] + (c0 + c) * 8);
        for (int64_t j = j0; j < end[0]; ++j) {  // the keys every row sees
            __m256 weight[R];
            for (int i = 0; i < R; ++i) weight[i] = _mm256_set1_ps(p[i * width + j]);
            for (int c = 0; c < W; ++c) {
                const __m256 v = in_register(_mm256_loadu_ps(values + j * D + (c0 + c) * 8));
                for (int i = 0; i < R; ++i) acc[i][c] = _mm256_fmadd_ps(weight[i], v, acc[i][c]);
            }
        }
#pragma GCC unroll 4
        for (int i = 1; i < R; ++i)  // the keys only later rows see
            for (int64_t j = end[0]; j < end[i]; ++j)
                for (int c = 0; c < W; ++c)
                    acc[i][c] = _mm256_fmadd_ps(_mm256_set1_ps(p[i * width + j]), _mm256_loadu_ps(values + j * D + (c0 + c) * 8), acc[i][c]);
        for (int i = 0; i < R; ++i)
            for (int c = 0; c < W; ++c) _mm256_storeu_ps(out[i] + (c0 + c) * 8, acc[i][c]);
    }
}

inline float total(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

template <class Stored>
struct Heads {  // one key head's view of the cache: position j's vector at base + j * C * 8
    const Stored* keys;
    const Stored* values;
};

// `count` rows of one key head: row r is query r / group's head r % group, and sees the first
// first + r / group keys. q [count, C * 8] already scaled; row r's result goes to out + r / group *
// stride + r % group * C * 8; scores holds count x `width` floats (width >= the most keys, rounded up
// to 8).
struct Rows {
    int count, group;
    int64_t first, width, stride;
    float* scores;
    float* out;
    int64_t most() const { return first + (count - 1) / group; }
    int64_t seen(int r) const { return first + r / group; }
    int from(int64_t j) const { return int(std::max<int64_t>(0, (j - first + 1) * group)); }  // rows that see key j
    float* result(int r, int D) const { return out + r / group * stride + r % group * D; }
};

// Rows r.. up to end, R at a time and then one at a time: each(row) for R rows, then for 1.
template <int R, class Each>
inline void in_groups(int r, int end, Each each) {
    for (; r + R <= end; r += R) each.template operator()<R>(r);
    for (; r < end; ++r) each.template operator()<1>(r);
}

// A key head's rows in float32, FMAs on AVX2's 8 lanes.
struct Float32 {
    using Stored = float;
    const float* q;
    Float32(const float* query, int, int) : q(query) {}

    static __m256 weight(__m256 p, float* s, int64_t j0) {  // the probabilities of keys j0.. of a row
        _mm256_storeu_ps(s + j0, p);
        return p;
    }

    template <int C>  // every row's scores of 4 keys at a time, each key read once
    void score(const Rows& at, const float* keys) const {
        constexpr int D = C * 8;
        const int64_t most = at.most();
        for (int64_t j0 = 0; j0 < most; j0 += 4) {
            const float* key[4];
            for (int t = 0; t < 4; ++t) key[t] = keys + std::min(j0 + t, most - 1) * D;  // past a row's keys: not used
            for (int t = 0; t < 4; ++t)
                for (int b = 0; b < D * 4; b += 64)
                    _mm_prefetch(reinterpret_cast<const char*>(keys + std::min(j0 + AHEAD + t, most - 1) * D) + b, _MM_HINT_T1);
            in_groups<SCORED>(at.from(j0), at.count, [&]<int R>(int r) {
                score_rows<C, R>(q + r * D, key, at.scores + r * at.width + j0, at.width);
            });
        }
    }

    template <int C>  // the values of keys j0..j1 - 1 for every row that sees them
    void weigh(const Rows& at, const float* values, int64_t j0, int64_t j1) const {
        in_groups<WEIGHED>(at.from(j0), at.count, [&]<int R>(int r) {
            int64_t end[R];
            float* out[R];
            for (int i = 0; i < R; ++i) end[i] = std::min(at.seen(r + i), j1), out[i] = at.result(r + i, C * 8);
            weigh_rows<C, R>(at.scores + r * at.width, at.width, values, j0, end, out);
        });
    }
};

#ifdef __AVX512BF16__
constexpr int ROW_BLOCK = 24;  // rows whose queries stay in L1 while they score every key
constexpr int SCORED_HALVES = 3;  // rows scored together (4: no faster)
constexpr int WEIGHED_HALVES = 2;  // rows weighing values together: 16 sums of 16 lanes (3 or 4 rows: slower)

inline __m512i halves(const float* x) {  // 32 floats rounded to bfloat16 (to nearest even)
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
}

inline void put(const float* x, uint16_t* to, int D) {  // D floats stored as bfloat16s, rounded as `halves`
    for (int c = 0; c < D; c += 32) _mm512_storeu_si512(to + c, halves(x + c));
}

inline __m256i sixteen(const uint16_t* x) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)); }
inline __m256i sixteen(const float* x) { return (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x)); }  // rounded as `halves`

inline __m512 dot(__m512 sum, __m512i a, __m512i b) {  // each lane: sum + a's pair of bfloat16s by b's
    return _mm512_dpbf16_ps(sum, (__m512bh)a, (__m512bh)b);
}

// The scores of R rows (q: H = C / 4 chunks of 32 bfloat16s a row) by 4 keys (key[t]: H chunks each) into
// to (rows `width` floats apart); each lane's sum of 16 by the same tree.
template <int C, int R>
inline void score_halves(const __m512i* q, const __m512i* const* key, float* to, int64_t width) {
    constexpr int H = C / 4;
    __m512 acc[R][4];
    for (int i = 0; i < R; ++i)
        for (int t = 0; t < 4; ++t) acc[i][t] = _mm512_setzero_ps();
    for (int c = 0; c < H; ++c) {
        __m512i part[R];
        for (int i = 0; i < R; ++i) part[i] = _mm512_loadu_si512(q + i * H + c);
        for (int t = 0; t < 4; ++t) {
            const __m512i k = in_register(_mm512_loadu_si512(key[t] + c));
            for (int i = 0; i < R; ++i) acc[i][t] = dot(acc[i][t], part[i], k);
        }
    }
    for (int i = 0; i < R; ++i) {
        __m256 half[4];
        for (int t = 0; t < 4; ++t)
            half[t] = _mm256_add_ps(_mm512_castps512_ps256(acc[i][t]), _mm512_extractf32x8_ps(acc[i][t], 1));
        _mm_storeu_ps(to + i * width, lane_sums(half));
    }
}

// R rows' weighted sums of a block's pairs of values added to out[i]: row i weighs pairs 0..end[i] - 1
// (ends ascending) by its pairs of probabilities p + i * width; pair k's chunk c of 16 dims at
// pairs[k * C / 2 + c], loaded once for the rows that see it.
template <int C, int R>
inline void weigh_halves(const uint32_t* p, int64_t width, const __m512i* pairs, const int64_t* end, float* const* out) {
    constexpr int S = C / 2, W = S < 8 ? S : 8;  // chunks of 16 floats, at a time
    for (int c0 = 0; c0 < S; c0 += W) {
        __m512 acc[R][W];
        for (int i = 0; i < R; ++i)
            for (int c = 0; c < W; ++c) acc[i][c] = _mm512_loadu_ps(out[i] + (c0 + c) * 16);
        for (int64_t k = 0; k < end[0]; ++k) {  // the pairs every row sees
            __m512i weight[R];
            for (int i = 0; i < R; ++i) weight[i] = _mm512_set1_epi32(int(p[i * width + k]));
            for (int c = 0; c < W; ++c) {
                const __m512i v = in_register(_mm512_load_si512(pairs + k * S + c0 + c));
                for (int i = 0; i < R; ++i) acc[i][c] = dot(acc[i][c], weight[i], v);
            }
        }
        for (int i = 1; i < R; ++i)  // the pairs only later rows see
            for (int64_t k = end[0]; k < end[i]; ++k)
                for (int c = 0; c < W; ++c)
                    acc[i][c] = dot(acc[i][c], _mm512_set1_epi32(int(p[i * width + k])), _mm512_load_si512(pairs + k * S + c0 + c));
        for (int i = 0; i < R; ++i)
            for (int c = 0; c < W; ++c) _mm512_storeu_ps(out[i] + (c0 + c) * 16, acc[i][c]);
    }
}

// A key head's rows over a cache of bfloat16s or floats (`Cached`), the queries, keys, probabilities and
// values in bfloat16, VDPBF16PS on AVX512's 16 lanes, each pair of products summed in float32. A float
// cache's keys are rounded once for the task; a block's values are paired (and rounded) once for every row;
// a row's probabilities are rounded where they are computed, in place (bfloat16 j at the row's byte 2j:
// written after the floats there are read) and summed rounded.
template <class Cached>
struct Halves {
    using Stored = Cached;
    struct alignas(64) Chunk {
        __m512i v;
    };
    static __m512i* chunks(std::vector<Chunk>& kept, int64_t n) {  // a thread's buffer, kept between calls
        if (int64_t(kept.size()) < n) kept.resize(n);
        return &kept[0].v;
    }
    __m512i *q, *pairs;  // the queries, a block's values
    Halves(const float* query, int count, int D) {
        thread_local std::vector<Chunk> rounded, paired;
        q = chunks(rounded, int64_t(count) * D / 32);
        pairs = chunks(paired, BLOCK / 2 * D / 16);
        for (int64_t c = 0; c < int64_t(count) * D / 32; ++c) q[c] = halves(query + c * 32);
    }

    static __m256 weight(__m256 p, float* s, int64_t j0) {
        const __m128i h = (__m128i)_mm256_cvtneps_pbh(p);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(reinterpret_cast<uint16_t*>(s) + j0), h);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }

    template <int C>  // the keys in bfloat16: the cache's own, or a float cache's rounded once for the task
    static const uint16_t* bfloat16_keys(const Rows& at, const Cached* keys) {
        if constexpr (std::is_same_v<Cached, uint16_t>) {
            return keys;
        } else {
            constexpr int D = C * 8, H = C / 4;
            const int64_t most = at.most();
            thread_local std::vector<Chunk> rounded;
            __m512i* k = chunks(rounded, most * H);
            for (int64_t j = 0; j < most; ++j) {
                for (int b = 0; b < D * 4; b += 64)
                    _mm_prefetch(reinterpret_cast<const char*>(keys + std::min(j + AHEAD, most - 1) * D) + b, _MM_HINT_T1);
                for (int c = 0; c < H; ++c) k[j * H + c] = halves(keys + j * D + c * 32);
            }
            return reinterpret_cast<const uint16_t*>(k);
        }
    }

    template <int C>  // blocks of rows in L1, each over every key it sees, 4 at a time
    void score(const Rows& at, const Cached* cached) const {
        constexpr int D = C * 8, H = C / 4;
        const int64_t most = at.most();
        const uint16_t* keys = bfloat16_keys<C>(at, cached);
        for (int r0 = 0; r0 < at.count; r0 += ROW_BLOCK) {
            const int r1 = std::min(at.count, r0 + ROW_BLOCK);
            for (int64_t j0 = 0; j0 < at.seen(r1 - 1); j0 += 4) {
                const __m512i* key[4];
                for (int t = 0; t < 4; ++t) {  // past a row's keys: not used
                    key[t] = reinterpret_cast<const __m512i*>(keys + std::min(j0 + t, most - 1) * D);
                    if (r0 == 0)  // a step's keys come from memory
                        for (int b = 0; b < D * 2; b += 64)
                            _mm_prefetch(reinterpret_cast<const char*>(keys + std::min(j0 + AHEAD + t, most - 1) * D) + b, _MM_HINT_T1);
                }
                in_groups<SCORED_HALVES>(std::max(r0, at.from(j0)), r1, [&]<int R>(int r) {
                    score_halves<C, R>(q + r * H, key, at.scores + r * at.width + j0, at.width);
                });
            }
        }
    }

    template <int C>  // keys j0 (even).. j1 - 1 in pairs, an odd count's last pair ending in its last key again
    void weigh(const Rows& at, const Cached* values, int64_t j0, int64_t j1) {
        constexpr int D = C * 8, S = C / 2;
        for (int64_t j = j0; j < j1; j += 2) {
            const Cached* a = values + j * D;
            const Cached* b = values + std::min(j + 1, j1 - 1) * D;  // weighed by a zero
            for (int c = 0; c < S; ++c) {
                const __m512i low = _mm512_cvtepu16_epi32(sixteen(a + c * 16));
                const __m512i high = _mm512_cvtepu16_epi32(sixteen(b + c * 16));
                pairs[(j - j0) / 2 * S + c] = _mm512_or_si512(low, _mm512_slli_epi32(high, 16));
            }
        }
        in_groups<WEIGHED_HALVES>(at.from(j0), at.count, [&]<int R>(int r) {
            int64_t end[R];
            float* out[R];
            for (int i = 0; i < R; ++i) end[i] = (std::min(at.seen(r + i), j1) - j0 + 1) / 2, out[i] = at.result(r + i, D);
            weigh_halves<C, R>(reinterpret_cast<const uint32_t*>(at.scores + r * at.width) + j0 / 2, at.width, pairs,
                               end, out);
        });
    }
};

template <int C, class Cached>  // bfloat16 where the CPU has VDPBF16PS and a head is whole chunks of 32
using Product = std::conditional_t<C % 4 == 0, Halves<Cached>, Float32>;
constexpr bool HALVES = true;
#else
template <int C, class Cached>
using Product = Float32;
constexpr bool HALVES = false;
#endif

// Runs `run` (a template lambda) with the type of a cache of `bytes`-wide values: floats, or bfloat16s where
// heads of C chunks take them (`Halves`); false for another width.
template <int C, class Run>
bool cached_as(int64_t bytes, Run run) {
    if (bytes == 4) return run.template operator()<float>(), true;
    if constexpr (HALVES && C % 4 == 0)
        if (bytes == 2) return run.template operator()<uint16_t>(), true;
    return false;
}

inline void put(const float* x, float* to, int D) { std::copy(x, x + D, to); }

// Row r's probabilities exp(score - max) over its keys, in place of its scores (zeros past its keys
// up to a multiple of 8; rounded as `Product` weighs them); returns their sum.
template <class Product>
float probabilities(float* s, int64_t n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 top = _mm256_set1_ps(-INFINITY);
    for (int64_t j0 = 0; j0 < n; j0 += 8) {
        __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(n - j0)), lane));
        top = _mm256_max_ps(top, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_loadu_ps(s + j0), valid));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    __m256 largest = _mm256_set1_ps(_mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m))));
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j0 = 0; j0 < n; j0 += 8) {
        __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(n - j0)), lane));
        __m256 p = _mm256_and_ps(exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + j0), largest)), valid);
        sum = _mm256_add_ps(sum, Product::weight(p, s, j0));
    }
    return total(sum);
}

// Every row's attention: scores by 4 keys at a time, probabilities, then the values of BLOCK keys at a
// time weighed for every row that sees them, and the sums divided last.
template <int C, class Product>
void rows(const float* q, Rows at, Heads<typename Product::Stored> kv) {
    constexpr int D = C * 8;
    const int64_t most = at.most();
    Product product(q, at.count, D);
    product.template score<C>(at, kv.keys);
    std::vector<float> sums(at.count);
    for (int r = 0; r < at.count; ++r) {
        sums[r] = probabilities<Product>(at.scores + r * at.width, at.seen(r));
        for (int c = 0; c < C; ++c) _mm256_storeu_ps(at.result(r, D) + c * 8, _mm256_setzero_ps());
    }
    for (int64_t j0 = 0; j0 < most; j0 += BLOCK) {  // the values of BLOCK keys, for every row that sees them
        for (int64_t j = j0 + BLOCK; j < std::min(most, j0 + 2 * BLOCK); ++j)  // the next block's values, into L2
            for (int b = 0; b < D * 4; b += 64) _mm_prefetch(reinterpret_cast<const char*>(kv.values + j * D) + b, _MM_HINT_T1);
        product.template weigh<C>(at, kv.values, j0, std::min(most, j0 + BLOCK));
    }
    for (int r = 0; r < at.count; ++r)
        for (int c = 0; c < C; ++c) {
            float* o = at.result(r, D) + c * 8;
            _mm256_storeu_ps(o, _mm256_div_ps(_mm256_loadu_ps(o), _mm256_set1_ps(sums[r])));
        }
}

// Where query i's head h lies ([batch, heads, queries, dim] as transformers passes it, or [queries, heads,
// dim] as a decoder's product leaves it), and whether it is first rotated by the position's cos and sin
// ([queries, dim] each): (x cos) + (rotate_half(x) sin), each product rounded, as transformers'
// apply_rotary_pos_emb computes it.
struct Queries {
    const float* at;
    int64_t batch, head, row;  // strides
    const float* cos;  // or null: not rotated
    const float* sin;
};

template <int D>
inline void rotated(const float* x, const float* cos, const float* sin, float* to) {
    for (int d = 0; d < D / 2; d++) to[d] = x[d] * cos[d] + -x[d + D / 2] * sin[d];
    for (int d = D / 2; d < D; d++) to[d] = x[d] * cos[d] + x[d - D / 2] * sin[d];
}

template <int C, class Stored>
void attend(Queries query, int64_t batch, int64_t heads, int64_t queries, const void* cached_keys,
            const void* cached_values, int64_t kv_heads, int64_t count, int64_t batch_stride, int64_t head_stride,
            float scaling, float* out) {
    constexpr int D = C * 8;
    const auto keys = static_cast<const Stored*>(cached_keys), values = static_cast<const Stored*>(cached_values);
    const int group = int(heads / kv_heads);
    // A task is one key head's rows of a run of queries: its keys read once for them all. Runs enough
    // for every thread (how rows are shared out changes no row's bits).
    const int64_t heads_all = batch * kv_heads;
    const int64_t parts = std::min<int64_t>(queries, (omp_get_max_threads() + heads_all - 1) / heads_all);
    const int64_t run = (queries + parts - 1) / parts, width = (count + 7) / 8 * 8;
#pragma omp parallel
    {
        // not zeroed: a prefill's pieces of 64 queries would clear megabytes a layer
        const auto q = std::make_unique_for_overwrite<float[]>(run * group * D);
        const auto scores = std::make_unique_for_overwrite<float[]>(run * group * width);
#pragma omp for schedule(static)
        for (int64_t task = 0; task < heads_all * parts; ++task) {
            const int64_t b = task / (kv_heads * parts), h = task / parts % kv_heads, i0 = task % parts * run;
            const int64_t i1 = std::min(queries, i0 + run);
            for (int64_t i = i0; i < i1; ++i)
                for (int g = 0; g < group; ++g) {
                    const float* from = query.at + b * query.batch + (h * group + g) * query.head + i * query.row;
                    float* to = q.get() + ((i - i0) * group + g) * D;
                    if (query.cos) {
                        rotated<D>(from, query.cos + i * D, query.sin + i * D, to);
                        from = to;
                    }
                    for (int d = 0; d < D; ++d) to[d] = from[d] * scaling;
                }
            const int64_t at = b * batch_stride + h * head_stride;
            const Rows task{int((i1 - i0) * group), group, count - queries + 1 + i0, width, heads * D, scores.get(),
                            out + ((b * queries + i0) * heads + h * group) * D};
            rows<C, Product<C, Stored>>(q.get(), task, Heads<Stored>{keys + at, values + at});
        }
    }
}

// A decoder layer's new keys and values [queries, kv_heads, dim], the keys rotated, into the cache's
// positions start.. ([kv_heads, >= start + queries, dim], heads head_stride values apart), in the cache's
// type.
template <int D, class Stored>
void store(const float* key, const float* value, const float* cos, const float* sin, int64_t queries, int64_t kv_heads,
           void* cached_keys, void* cached_values, int64_t start, int64_t head_stride) {
    const auto keys = static_cast<Stored*>(cached_keys), values = static_cast<Stored*>(cached_values);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < queries * kv_heads; ++t) {
        const int64_t i = t / kv_heads, h = t % kv_heads, at = h * head_stride + (start + i) * D;
        float turned[D];
        rotated<D>(key + t * D, cos + i * D, sin + i * D, turned);
        put(turned, keys + at, D);
        put(value + t * D, values + at, D);
    }
}

}  // namespace

extern "C" {

// query [batch, heads, queries, dim] contiguous; keys and values [batch, kv_heads, >= count, dim] with
// positions dim values apart, of `bytes` each: float32, or bfloat16 where `Halves` takes them (the build has
// AVX512-BF16 and dim is a multiple of 32); out [batch, queries, heads, dim]. Returns 0, or -1 for a dim or
// a width it lacks.
int attend(const float* query, int64_t batch, int64_t heads, int64_t queries, int64_t dim, const void* keys,
           const void* values, int64_t kv_heads, int64_t count, int64_t batch_stride, int64_t head_stride,
           float scaling, float* out, int64_t bytes) {
    const Queries at{query, heads * queries * dim, queries * dim, dim, nullptr, nullptr};
    switch (dim) {
#define DIM(d) case d: return cached_as<d / 8>(bytes, [&]<class S>() { \
            attend<d / 8, S>(at, batch, heads, queries, keys, values, kv_heads, count, batch_stride, head_stride, \
                             scaling, out); }) ? 0 : -1;
        DIM(8) DIM(16) DIM(32) DIM(64) DIM(128) DIM(256)
#undef DIM
    }
    return -1;
}

// A decoder layer's attention from its projections, as rows of positions: query [queries, heads, dim], key
// and value [queries, kv_heads, dim]. Rotates the query and the key by cos and sin [queries, dim], writes
// the key and the value to the cache (keys and values [kv_heads, capacity, dim]) at positions start..,
// and attends as `attend` does over the start + queries positions; out [queries, heads, dim].
int attend_projected(const float* query, const float* key, const float* value, const float* cos, const float* sin,
                     int64_t heads, int64_t queries, int64_t dim, void* keys, void* values, int64_t kv_heads,
                     int64_t start, int64_t capacity, float scaling, float* out, int64_t bytes) {
    const Queries at{query, 0, dim, heads * dim, cos, sin};
    switch (dim) {
#define DIM(d) case d: return cached_as<d / 8>(bytes, [&]<class S>() { \
            store<d, S>(key, value, cos, sin, queries, kv_heads, keys, values, start, capacity * d); \
            attend<d / 8, S>(at, 1, heads, queries, keys, values, kv_heads, start + queries, 0, capacity * d, scaling, \
                             out); }) ? 0 : -1;
        DIM(8) DIM(16) DIM(32) DIM(64) DIM(128) DIM(256)
#undef DIM
    }
    return -1;
}
}
