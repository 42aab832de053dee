// y = x W^T with W in a GGUF's own blocks, laid out as weight tiles by `gguf_bf16.repack`, on AMX or,
// built without -mamx-tile, on AVX512-BF16's VDPBF16PS: x and y in float32, x rounded to bfloat16 for
// the dot products. Why: gguf_bf16.py.
//
// A weight of sub-block u is q s_u + o_u: an integer code q (small enough for bfloat16 to hold it
// exactly) times a scale, plus an offset, both per output (the GGUF's d sc and -dmin m for Q4_K). So
//     y = sum over u of  s_u (x_u . q_u)  +  o_u (sum of x_u)
// The tiles hold the codes as bfloat16 integers (128 + q: a mask and an OR), TDPBF16PS sums x_u . q_u
// (and 128 x_u, taken away again) from zero for each sub-block in float32, and the scales are applied in
// float32 FMAs, sub-block after sub-block.
// A row's every operation is the same whatever the number of rows and whichever path runs them, and a
// tile computes each row from that row of x alone: verifying a draft reproduces one-token steps bit for
// bit.
//
// VDPBF16PS reads the same layout: a tile row is one vector of 16 outputs x 2 inputs, multiplied by a
// row's two inputs broadcast. Each row's sums are its own chain of them, so the same holds.
//
// Tiles: 0 and 1 sum rows 0-15 for a panel's outputs 0-15 and 16-31, 2 and 3 rows 16-31; 4 and 5 hold
// x's rows 0-15 and 16-31 over one sub-block, 6 and 7 the codes: rows of input pairs, each row 16
// outputs x 2 inputs (the layout TDPBF16PS reads).

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <initializer_list>

namespace {

enum Kind { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q6_K = 14 };

inline __m512 halves(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512i bytes_to_int32(const uint8_t* p, bool is_signed) {  // 16 bytes, one an int32 lane
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return is_signed ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v);
}
inline __m512 bytes_u(const uint8_t* p) { return _mm512_cvtepi32_ps(bytes_to_int32(p, false)); }
inline __m512 bytes_s(const uint8_t* p) { return _mm512_cvtepi32_ps(bytes_to_int32(p, true)); }

// A unit: 16 outputs' blocks over the same inputs. Per block: the fields, each a value per output
// (float16 scales, 6-bit or 8-bit sub-block scales as bytes), then each 32-input chunk's codes for the
// 16 rows of a weight tile, row r's word 2j + p output j's input 2r + p, packed four rows (nibbles) or
// two rows (bytes) to a word (`code_words`); Q5's and Q6_K's codes are nibbles and, after them, their
// one or two high bits (HIGH), 16 or 8 rows to a word. Per kind: inputs per block and per scale (SUB),
// bytes of fields and of a block, whether codes are nibbles (and their high bits), whether weights have
// an offset, and the value of code 0.
template <int K> struct Units;
template <> struct Units<Q4_0> {
    static constexpr int BLOCK = 32, SUB = 32, FIELDS = 32, BYTES = 288, LOW = -8;
    static constexpr bool NIBBLES = true, OFFSET = false;
    static constexpr int HIGH = 0;
    static void scales(const uint8_t* b, int, __m512& s, __m512&) { s = halves(b); }
};
template <> struct Units<Q4_1> {
    static constexpr int BLOCK = 32, SUB = 32, FIELDS = 64, BYTES = 320, LOW = 0;
    static constexpr bool NIBBLES = true, OFFSET = true;
    static constexpr int HIGH = 0;
    static void scales(const uint8_t* b, int, __m512& s, __m512& o) { s = halves(b), o = halves(b + 32); }
};
template <> struct Units<Q5_0> {
    static constexpr int BLOCK = 32, SUB = 32, FIELDS = 32, BYTES = 352, LOW = -16;
    static constexpr bool NIBBLES = true, OFFSET = false;
    static constexpr int HIGH = 1;
    static void scales(const uint8_t* b, int, __m512& s, __m512&) { s = halves(b); }
};
template <> struct Units<Q5_1> {
    static constexpr int BLOCK = 32, SUB = 32, FIELDS = 64, BYTES = 384, LOW = 0;
    static constexpr bool NIBBLES = true, OFFSET = true;
    static constexpr int HIGH = 1;
    static void scales(const uint8_t* b, int, __m512& s, __m512& o) { s = halves(b), o = halves(b + 32); }
};
template <> struct Units<Q8_0> {  // codes are signed bytes: converted through float32
    static constexpr int BLOCK = 32, SUB = 32, FIELDS = 32, BYTES = 544, LOW = -128;
    static constexpr bool NIBBLES = false, OFFSET = false;
    static constexpr int HIGH = 0;
    static void scales(const uint8_t* b, int, __m512& s, __m512&) { s = halves(b); }
};
template <> struct Units<Q4_K> {  // d, dmin, then 8 sub-blocks' scales and 8 minima: d sc q - dmin m
    static constexpr int BLOCK = 256, SUB = 32, FIELDS = 320, BYTES = 2368, LOW = 0;
    static constexpr bool NIBBLES = true, OFFSET = true;
    static constexpr int HIGH = 0;
    static void scales(const uint8_t* b, int u, __m512& s, __m512& o) {
        s = _mm512_mul_ps(halves(b), bytes_u(b + 64 + 16 * u));
        o = _mm512_xor_ps(_mm512_mul_ps(halves(b + 32), bytes_u(b + 192 + 16 * u)), _mm512_set1_ps(-0.0f));
    }
};
template <> struct Units<Q6_K> {  // d, then 16 sub-blocks' signed scales: d sc (q - 32)
    static constexpr int BLOCK = 256, SUB = 16, FIELDS = 288, BYTES = 3360, LOW = -32;
    static constexpr bool NIBBLES = true, OFFSET = false;
    static constexpr int HIGH = 2;
    static void scales(const uint8_t* b, int u, __m512& s, __m512&) { s = _mm512_mul_ps(halves(b), bytes_s(b + 32 + 16 * u)); }
};

constexpr int PANEL = 32;    // outputs per panel: two units (the last may have one)
constexpr int64_t FEW = 32;  // up to this many rows, each sub-block's tiles are made as they are used
constexpr int64_t ROWS = 64;  // up to this many rows (more than any verification), each row exactly alike
constexpr int64_t SPAN = 256;  // a prefill's rows a panel's tiles are made for: their x stays in L2 (1,500 at once: 2x slower)
constexpr int64_t DIRECT = 2;  // without AMX, up to this many rows multiply tile rows as they are made from the codes
constexpr int AHEAD = 2048;  // bytes of a unit's blocks read ahead: a one-token step 80 ms without, 62 with (1,024-16,384: 61-70)
constexpr int PASS = 8;  // gguf-q8's rows a unit's blocks are multiplied by at once (then 4, 2, 1)
// Full passes (8 to 64 rows: verifications, a prefill's pieces) read each unit's blocks FAR ahead into
// L2 instead: the 1.5B's 197 matrices one after another (their 950 MB from memory) for 16 rows 81.7
// against 87.1 ms, 8 rows 42.8 against 44.2 (medians taking turns, Zen 4 EPYC); one row and 4 rows were
// slower so (31.3 against 30.6, 32.9 against 32.4), 64 rows alike. In the model after 1,500 tokens, a
// 16-token verification 121.8 against 129.2 ms, a step alike (medians of 80).
constexpr int FAR = 4096;

#ifdef __AMX_TILE__
struct alignas(64) Config {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Tiles for `rows` rows (1-32) over `sub` inputs.
void configure(int rows, int sub) {
    Config c;
    const int top = rows < 16 ? rows : 16, bottom = rows - top;
    for (int t : {0, 1}) c.rows[t] = top, c.colsb[t] = 64;
    c.rows[4] = top, c.colsb[4] = 2 * sub;
    if (bottom > 0) {
        for (int t : {2, 3}) c.rows[t] = bottom, c.colsb[t] = 64;
        c.rows[5] = bottom, c.colsb[5] = 2 * sub;
    }
    for (int t : {6, 7}) c.rows[t] = sub / 2, c.colsb[t] = 64;
    asm volatile("" : : "r"(&c) : "memory");  // GCC's _tile_loadconfig tells the compiler it reads 8 bytes
    _tile_loadconfig(&c);
}
#endif

// From cvtne2ps_pbh(inputs 2r + 1, inputs 2r), words [2r of outputs 0-15, 2r + 1 of 0-15], to a tile
// row's [output 0: 2r, 2r + 1; output 1: ...].
inline __m512i pairs() {
    alignas(64) int16_t at[32];
    for (int t = 0; t < 32; t++) at[t] = int16_t((t % 2) * 16 + t / 2);
    return _mm512_load_si512(at);
}

// Bytes of a 32-input chunk's codes: nibbles (and a word per high bit), or bytes.
template <class L>
constexpr int CHUNK = L::NIBBLES ? 256 + 64 * L::HIGH : 512;

// Where tile row r's high bits lie in the 16-bit words of its chunk's high-bit word r * HIGH / 16: the
// high bits of the rows whose nibbles share a byte of the nibble words share that byte, in fields of
// HIGH bits (field 2g + n for the low (n = 0) or high nibble of word g, g counted from the high-bit
// word's first), so that one shift and a mask put them beside either nibble of the byte (`sub_sums`).
template <class L>
constexpr int high_bits_at(int r) { return 8 * (r % 4 / 2) + L::HIGH * (2 * (r / 4 % (4 / L::HIGH)) + r % 2); }

// Words 2j + p of tile row r of a 32-input chunk: output j's code for input 2r + p, unsigned (Q8_0's
// signed). `repack` puts four rows' nibbles in a word (row 4g + t at bits 4t of the 64 bytes g) or
// two rows' bytes (row 2g + t at bits 8t), so that a row comes out of its 64 bytes with a shift and
// a mask: no shuffle. Q5's and Q6_K's high bits follow their nibbles (`high_bits_at`).
template <class L>
inline __m512i code_words(const uint8_t* codes, int r) {
    const __m512i v = _mm512_loadu_si512(codes + 64 * (L::NIBBLES ? r / 4 : r / 2));
    if (L::NIBBLES) {
        const __m512i q = _mm512_and_si512(_mm512_srli_epi16(v, 4 * (r % 4)), _mm512_set1_epi16(0x000F));
        if constexpr (L::HIGH == 0) return q;
        const __m512i h = _mm512_loadu_si512(codes + 256 + 64 * (r * L::HIGH / 16));
        const __m512i bits = _mm512_and_si512(_mm512_srli_epi16(h, high_bits_at<L>(r)), _mm512_set1_epi16((1 << L::HIGH) - 1));
        return _mm512_or_si512(q, _mm512_slli_epi16(bits, 4));
    }
    if (L::LOW == -128) return r % 2 ? _mm512_srai_epi16(v, 8) : _mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8);
    return r % 2 ? _mm512_srli_epi16(v, 8) : _mm512_and_si512(v, _mm512_set1_epi16(0x00FF));
}

// What the tiles add to each product of a sub-block, per unit of x: BIAS (sum of x). An unsigned code
// q below 128 becomes the bfloat16 of 128 + q by setting the exponent's bits (0x4300: 128 + q is
// exact in 7 mantissa bits), and the scaling takes (128 - LOW) (sum of x) away again. Q8_0's signed
// codes are converted through float32.
template <class L>
constexpr int BIAS = L::LOW == -128 ? 0 : 128 - L::LOW;

// Row r of a 32-input chunk's weight tile: its codes as bfloat16 integers, BIAS + LOW + q.
template <class L>
inline __m512i tile_row(const uint8_t* codes, int r, __m512i order) {
    const __m512i q = code_words<L>(codes, r);
    if (L::LOW != -128) return _mm512_or_si512(q, _mm512_set1_epi16(0x4300));
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(q, 16), 16));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_srai_epi32(q, 16));
    return _mm512_permutexvar_epi16(order, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
}

// Sub-block u of one unit's block b: its chunk's codes, and the chunk's tile row it starts at (Q6_K:
// two sub-blocks a chunk).
template <class L>
inline const uint8_t* sub_codes(const uint8_t* b, int u) { return b + L::FIELDS + u * L::SUB / 32 * CHUNK<L>; }
template <class L>
inline int first_row(int u) { return u * L::SUB % 32 / 2; }

// The weight tile of sub-block u of one unit's block b (SUB / 2 rows of 64 bytes) into `to`.
template <class L>
inline void weight_tile(const uint8_t* b, int u, __m512i order, uint8_t* to) {
    const uint8_t* codes = sub_codes<L>(b, u);
#pragma GCC unroll 16
    for (int r = 0; r < L::SUB / 2; r++) _mm512_store_si512(to + 64 * r, tile_row<L>(codes, first_row<L>(u) + r, order));
}

// The weight tile of 32-input chunk c of one unit's block b as bfloat16 weights, each the GGUF's
// (q s + o, rounded once in float32) rounded to bfloat16: what a prefill multiplies, over all inputs.
template <class L>
inline void dense_tile(const uint8_t* b, int c, __m512i order, uint8_t* to) {
    const uint8_t* codes = b + L::FIELDS + c * CHUNK<L>;
    for (int h = 0; h < 32 / L::SUB; h++) {
        __m512 s, o = _mm512_setzero_ps();
        L::scales(b, c * 32 / L::SUB + h, s, o);
#pragma GCC unroll 16
        for (int r = h * L::SUB / 2; r < (h + 1) * L::SUB / 2; r++) {
            const __m512i v = code_words<L>(codes, r);  // dword j: output j's codes at 2r (low word), 2r + 1
            const __m512i low = L::LOW == -128 ? _mm512_srai_epi32(_mm512_slli_epi32(v, 16), 16)
                                               : _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF));
            const __m512i high = L::LOW == -128 ? _mm512_srai_epi32(v, 16) : _mm512_srli_epi32(v, 16);
            const __m512i offset = _mm512_set1_epi32(L::LOW == -128 ? 0 : L::LOW);
            auto weight = [&](__m512i q) {
                const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(q, offset));
                return L::OFFSET ? _mm512_fmadd_ps(f, s, o) : _mm512_mul_ps(f, s);
            };
            const __m512i words = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(weight(high), weight(low)));
            _mm512_store_si512(to + 64 * r, _mm512_permutexvar_epi16(order, words));
        }
    }
}

#ifndef __AMX_TILE__
// The VDPBF16PS sums of R rows of x (a row every k values, from x) times a weight tile of `pairs` rows
// (tile row t: weight(t), 16 outputs x 2 inputs, from memory or made from the codes) into to[32 r]:
// each row's chain from zero, even and odd tile rows in two chains added at the end, whatever R and
// wherever the tile rows come from.
template <int R, class Weight>
inline void dots(const uint16_t* x, int64_t k, Weight weight, int pairs, float* to) {
    __m512 even[R], odd[R];
    for (int r = 0; r < R; r++) even[r] = odd[r] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int t = 0; t < pairs; t += 2) {
        const __m512bh w0 = reinterpret_cast<__m512bh>(weight(t));
        const __m512bh w1 = reinterpret_cast<__m512bh>(weight(t + 1));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const int32_t* at = reinterpret_cast<const int32_t*>(x + r * k + 2 * t);
            even[r] = _mm512_dpbf16_ps(even[r], w0, reinterpret_cast<__m512bh>(_mm512_set1_epi32(at[0])));
            odd[r] = _mm512_dpbf16_ps(odd[r], w1, reinterpret_cast<__m512bh>(_mm512_set1_epi32(at[1])));
        }
    }
    for (int r = 0; r < R; r++) _mm512_store_ps(to + 32 * r, _mm512_add_ps(even[r], odd[r]));
}

// A prefill's R rows of x (from x, a row every k values) times a panel's W units of dense tiles (chunk
// c of unit h at tiles + (2 c + h) 1024), each row's sums one chain over every input, into y (a row
// every n values).
template <int R, int W>
inline void dense_rows(const uint16_t* x, int64_t k, const uint8_t* tiles, int64_t chunks, float* y, int64_t n) {
    __m512 acc[R][W];
    for (int r = 0; r < R; r++)
        for (int h = 0; h < W; h++) acc[r][h] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; c++)
        for (int t = 0; t < 16; t++) {
            __m512bh w[W];
            for (int h = 0; h < W; h++) w[h] = reinterpret_cast<__m512bh>(_mm512_load_si512(tiles + (2 * c + h) * 1024 + 64 * t));
#pragma GCC unroll 12
            for (int r = 0; r < R; r++) {
                const __m512bh v = reinterpret_cast<__m512bh>(
                    _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(x + r * k + 32 * c + 2 * t)));
                for (int h = 0; h < W; h++) acc[r][h] = _mm512_dpbf16_ps(acc[r][h], w[h], v);
            }
        }
    for (int r = 0; r < R; r++)
        for (int h = 0; h < W; h++) _mm512_storeu_ps(y + r * n + 16 * h, acc[r][h]);
}

template <int W>
void dense_block(const uint16_t* x, int64_t k, const uint8_t* tiles, int64_t chunks, float* y, int64_t n, int64_t rows) {
    int64_t r = 0;
    for (; r + 12 <= rows; r += 12) dense_rows<12, W>(x + r * k, k, tiles, chunks, y + r * n, n);
    for (; r + 4 <= rows; r += 4) dense_rows<4, W>(x + r * k, k, tiles, chunks, y + r * n, n);
    for (; r < rows; r++) dense_rows<1, W>(x + r * k, k, tiles, chunks, y + r * n, n);
}
#endif

// x rounded to bfloat16, and the sum of each row's rounded values over each sub-block, in float32.
template <class L>
void round_rows(const float* x, int64_t m, int64_t k, uint16_t* xb, float* sums) {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < m; r++)
        for (int64_t u = 0; u < k / L::SUB; u++) {
            __m512 total = _mm512_setzero_ps();
            for (int h = 0; h < L::SUB; h += 16) {
                const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + r * k + u * L::SUB + h));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(xb + r * k + u * L::SUB + h), reinterpret_cast<__m256i>(b));
                total = _mm512_add_ps(total, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(b)), 16)));
            }
            sums[r * (k / L::SUB) + u] = _mm512_reduce_add_ps(total);
        }
}

// More than ROWS rows (a prefill): SPAN rows at a time, each panel's weights dequantized to bfloat16
// once for them, over all inputs, and summed by the tiles over every input; x already rounded into xb.
template <class L>
void dense(const uint16_t* xb, int64_t m, int64_t k, const uint8_t* units, int64_t n, float* y) {
    const int64_t unit_bytes = k / L::BLOCK * L::BYTES, chunks = k / 32, panels = (n + PANEL - 1) / PANEL;
    const __m512i order = pairs();
    uint8_t* tiles = static_cast<uint8_t*>(aligned_alloc(64, chunks * 2 * 1024));
#ifdef __AMX_TILE__
    alignas(64) float sums[32 * 32];
    int configured = 0;
#endif
    for (int64_t first = 0; first < m; first += SPAN) {
        const int64_t last = first + SPAN < m ? first + SPAN : m;
#pragma omp for schedule(static)
    for (int64_t p = 0; p < panels; p++) {
        const int width = n - p * PANEL < PANEL ? 1 : 2;
        for (int64_t c = 0; c < chunks; c++)
            for (int h = 0; h < width; h++)
                dense_tile<L>(units + (2 * p + h) * unit_bytes + c * 32 / L::BLOCK * L::BYTES, int(c % (L::BLOCK / 32)),
                              order, tiles + (2 * c + h) * 1024);
#ifdef __AMX_TILE__
        for (int64_t r0 = first; r0 < last; r0 += 32) {
            const int rows = int(last - r0 < 32 ? last - r0 : 32);
            if (rows != configured) configure(rows, 32), configured = rows;
            _tile_zero(0);
            _tile_zero(1);
            if (rows > 16) {
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int64_t c = 0; c < chunks; c++) {
                _tile_loadd(6, tiles + 2 * c * 1024, 64);
                _tile_loadd(7, tiles + (2 * c + 1) * 1024, 64);
                _tile_loadd(4, xb + r0 * k + c * 32, 2 * k);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                if (rows > 16) {
                    _tile_loadd(5, xb + (r0 + 16) * k + c * 32, 2 * k);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
            }
            _tile_stored(0, sums, 128);
            _tile_stored(1, sums + 16, 128);
            if (rows > 16) {
                _tile_stored(2, sums + 16 * 32, 128);
                _tile_stored(3, sums + 16 * 32 + 16, 128);
            }
            for (int r = 0; r < rows; r++)
                for (int h = 0; h < width; h++)
                    _mm512_storeu_ps(y + (r0 + r) * n + p * PANEL + 16 * h, _mm512_load_ps(sums + 32 * r + 16 * h));
        }
#else
        if (width == 2)
            dense_block<2>(xb + first * k, k, tiles, chunks, y + first * n + p * PANEL, n, last - first);
        else
            dense_block<1>(xb + first * k, k, tiles, chunks, y + first * n + p * PANEL, n, last - first);
#endif
    }
    }
    free(tiles);
}

// Up to ROWS rows (steps, verifications): each sub-block's products from zero, scaled in float32.
template <class L>
void exact(const uint16_t* xb, const float* xsums, int64_t m, int64_t k, const uint8_t* units, int64_t n, float* y) {
    const int64_t unit_bytes = k / L::BLOCK * L::BYTES, subs = k / L::SUB, panels = (n + PANEL - 1) / PANEL;
    constexpr int TILE_BYTES = L::SUB / 2 * 64;
    const __m512i order = pairs();
    alignas(64) float sums[2][32 * 32], acc[32 * 32];
    // Few rows: three sub-blocks' tiles and scales at a time, in L1: the next made while this one
    // multiplies and the last is scaled. More: the panel's every tile and scale once, then each 32 rows read them all.
    const int64_t kept = m <= FEW ? 3 : subs;  // few: made, multiplied, scaled
    uint8_t* tiles = static_cast<uint8_t*>(aligned_alloc(64, kept * 2 * TILE_BYTES));
    __m512* scales = static_cast<__m512*>(aligned_alloc(64, kept * 4 * 64));
#ifdef __AMX_TILE__
    int configured = 0;
    constexpr bool direct = false;
#else
    const bool direct = m <= DIRECT;
#endif
    int width = 2;  // units in this panel: the last may have one
    const uint8_t* at = units;  // this panel's first unit
    auto make = [&](int64_t u, int64_t slot) {
        for (int h = 0; h < width; h++) {
            const uint8_t* b = at + h * unit_bytes + u * L::SUB / L::BLOCK * L::BYTES;
            const int within = int(u % (L::BLOCK / L::SUB));
            const uint8_t* next = at + h * unit_bytes + u * L::SUB * L::BYTES / L::BLOCK + AHEAD;  // about
            for (int i = 0; i < L::SUB * L::BYTES / L::BLOCK; i += 64) _mm_prefetch(reinterpret_cast<const char*>(next + i), _MM_HINT_T0);
            if (!direct) weight_tile<L>(b, within, order, tiles + (2 * slot + h) * TILE_BYTES);
            __m512 o = _mm512_setzero_ps();
            L::scales(b, within, scales[4 * slot + h], o);
            scales[4 * slot + 2 + h] = o;
        }
    };
    // The products of sub-block u's codes into sums[u % 2]: tile work, which runs beside the
    // vector work of making the next tiles and scaling the last sums.
#ifdef __AMX_TILE__
    auto multiply = [&](const uint16_t* xr, int rows, int64_t u, int64_t slot) {
        const uint8_t* w = tiles + 2 * slot * TILE_BYTES;
        float* to = sums[u % 2];
        _tile_zero(0);
        _tile_zero(1);
        _tile_loadd(6, w, 64);
        _tile_loadd(4, xr + u * L::SUB, 2 * k);
        _tile_dpbf16ps(0, 4, 6);
        _tile_stored(0, to, 128);
        if (width == 2) {
            _tile_loadd(7, w + TILE_BYTES, 64);
            _tile_dpbf16ps(1, 4, 7);
            _tile_stored(1, to + 16, 128);
        }
        if (rows > 16) {
            _tile_zero(2);
            _tile_zero(3);
            _tile_loadd(5, xr + 16 * k + u * L::SUB, 2 * k);
            _tile_dpbf16ps(2, 5, 6);
            _tile_stored(2, to + 16 * 32, 128);
            if (width == 2) {
                _tile_dpbf16ps(3, 5, 7);
                _tile_stored(3, to + 16 * 32 + 16, 128);
            }
        }
    };
#else
    // Few rows: the tile rows made from the codes as they are multiplied, else read from the tiles made.
    auto multiply = [&](const uint16_t* xr, int rows, int64_t u, int64_t slot) {
        for (int h = 0; h < width; h++) {
            const uint8_t* w = tiles + (2 * slot + h) * TILE_BYTES;
            const uint8_t* codes = sub_codes<L>(at + h * unit_bytes + u * L::SUB / L::BLOCK * L::BYTES, int(u % (L::BLOCK / L::SUB)));
            const int first = first_row<L>(int(u % (L::BLOCK / L::SUB)));
            auto made = [&](int t) { return tile_row<L>(codes, first + t, order); };
            auto read = [&](int t) { return _mm512_load_si512(w + 64 * t); };
            float* to = sums[u % 2] + 16 * h;
            const uint16_t* xu = xr + u * L::SUB;
            if (direct) {  // rows <= DIRECT = 2
                rows == 1 ? dots<1>(xu, k, made, L::SUB / 2, to) : dots<2>(xu, k, made, L::SUB / 2, to);
                continue;
            }
            int r = 0;
            for (; r + 4 <= rows; r += 4) dots<4>(xu + r * k, k, read, L::SUB / 2, to + 32 * r);
            for (; r < rows; r++) dots<1>(xu + r * k, k, read, L::SUB / 2, to + 32 * r);
        }
    };
#endif
    auto scale = [&](const float* xs, int rows, int64_t u, int64_t slot) {
        const __m512* s = scales + 4 * slot;
        const float* from = sums[u % 2];
        for (int r = 0; r < rows; r++)
            for (int h = 0; h < width; h++) {
                const __m512 sum = _mm512_set1_ps(xs[r * subs + u]);
                __m512 p = _mm512_load_ps(from + 32 * r + 16 * h);
                if (BIAS<L>) p = _mm512_fnmadd_ps(sum, _mm512_set1_ps(float(BIAS<L>)), p);
                __m512 a = _mm512_fmadd_ps(p, s[h], _mm512_load_ps(acc + 32 * r + 16 * h));
                if (L::OFFSET) a = _mm512_fmadd_ps(sum, s[2 + h], a);
                _mm512_store_ps(acc + 32 * r + 16 * h, a);
            }
    };
#pragma omp for schedule(static)
    for (int64_t p = 0; p < panels; p++) {
        at = units + 2 * p * unit_bytes;
        width = n - p * PANEL < PANEL ? 1 : 2;
        for (int64_t u = 0; u < (m > FEW ? subs : 1); u++) make(u, u);
        for (int64_t r0 = 0; r0 < m; r0 += 32) {
            const int rows = int(m - r0 < 32 ? m - r0 : 32);
#ifdef __AMX_TILE__
            if (rows != configured) configure(rows, L::SUB), configured = rows;
#endif
            for (int i = 0; i < rows * 32; i++) acc[i] = 0.0f;
            const uint16_t* xr = xb + r0 * k;
            const float* xs = xsums + r0 * subs;
            auto slot = [&](int64_t u) { return m <= FEW ? u % 3 : u; };
            for (int64_t u = 0; u < subs; u++) {
                multiply(xr, rows, u, slot(u));
                if (m <= FEW && u + 1 < subs) make(u + 1, slot(u + 1));
                if (u > 0) scale(xs, rows, u - 1, slot(u - 1));
            }
            scale(xs, rows, subs - 1, slot(subs - 1));
            for (int r = 0; r < rows; r++)
                for (int h = 0; h < width; h++) {
                    _mm512_storeu_ps(y + (r0 + r) * n + p * PANEL + 16 * h, _mm512_load_ps(acc + 32 * r + 16 * h));
                }
        }
    }
    free(tiles);
    free(scales);
}

// x's forms for any kind over k inputs (sub-blocks of 16 inputs at least), shared by a call's products:
// rounded to bfloat16 (xb, xsums) or quantized to 8 bits (xq, dx, xs, xi).
struct Scratch {
    uint16_t* xb;
    float* xsums;
    int8_t* xq;
    float* dx;
    float* xs;
    int16_t* xi;
    static void* buffer(int64_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }
    Scratch(int64_t m, int64_t k)
        : xb(static_cast<uint16_t*>(buffer(m * k * 2))), xsums(static_cast<float*>(buffer(m * k / 16 * 4))),
          xq(static_cast<int8_t*>(buffer((m + 15) * k))), dx(static_cast<float*>(buffer(m * k / 32 * 4))),
          xs(static_cast<float*>(buffer(m * k / 16 * 4))), xi(static_cast<int16_t*>(buffer(m * k / 16 * 2))) {}
    Scratch(const Scratch&) = delete;
    ~Scratch() {
        for (void* p : {static_cast<void*>(xb), static_cast<void*>(xsums), static_cast<void*>(xq), static_cast<void*>(dx),
                        static_cast<void*>(xs), static_cast<void*>(xi)})
            free(p);
    }
};

// Called by every thread of a parallel region; ends with a barrier.
template <class L> struct Product {
    static void run(const float* x, int64_t m, int64_t k, const uint8_t* units, int64_t n, float* y, const Scratch* t) {
        round_rows<L>(x, m, k, t->xb, t->xsums);  // ends with a barrier
        if (m > ROWS)
            dense<L>(t->xb, m, k, units, n, y);
        else
            exact<L>(t->xb, t->xsums, m, k, units, n, y);
    }
};

// --weights gguf-q8: x quantized to 8 bits per row and SCALED inputs (a scale d, codes -127..127: per
// 32 inputs as llama.cpp's Q8_0 for blocks of 32, per 256 as its Q8_K for the K-quants' blocks), times
// the same groups' codes by VPDPBUSD: four codes of an output (unsigned bytes) times four of x (signed)
// into one int32 lane. A 64-byte word of the groups holds, in output j's dword, inputs (0, 2, 1, 3) of
// four for byte codes (two tile rows), and for nibbles inputs (0, 4, 1, 5) of eight in the low nibbles
// and (2, 6, 3, 7) in the high: x's codes are stored in the same order, so one AND (and a shift) makes
// an operand.
// Blocks of 32, in float32 per block:   y += (s d) (sum of q x)  +  (s LOW + o) (d sum of x)
// K-quants, in int32 per sub-block u and float32 per block of 256 (the scales sc_u are integers):
//     Q4_K  y += (D d) (sum of sc_u (sum of q x)_u)  -  (Dmin d) (sum of m_u (sum of x)_u)
//     Q6_K  y += (D d) (sum of sc_u ((sum of q x)_u - 32 (sum of x)_u))
// The integer sums are exact whatever their order, the scaling each row's own chain: a row's result
// is the same whatever the number of rows.
template <class L>
constexpr int SCALED = L::BLOCK == 256 ? 256 : 32;  // inputs of x per scale

// x's codes, its scales dx (one per SCALED inputs) and its sums per sub-block: for blocks of 32, d times
// the sum of the codes (xs); for the K-quants the sum of the codes alone, int16 (xi: at most 32 x 127).
template <class L>
void quantize_rows(const float* x, int64_t m, int64_t k, int64_t rows, int8_t* xq, float* dx, float* xs, int16_t* xi) {
    constexpr int Q = SCALED<L>, PIECES = Q / 16;
    const int64_t scaled = k / Q, subs = k / L::SUB;
    // where row r's input i goes: row after row, or with `rows` (q8_tiles) 64 inputs of each row after another
    auto at = [&](int64_t r, int64_t i) { return rows ? 64 * (i / 64 * rows + r) + i % 64 : r * k + i; };
#pragma omp for schedule(static)
    for (int64_t r = m; r < rows; r++)  // rows past m, to a multiple of 16: zeros
        for (int64_t i = 0; i < k; i += 64) _mm512_storeu_si512(xq + at(r, i), _mm512_setzero_si512());
    // x's codes in the order the weights' bytes come, within each 8 inputs: a byte shuffle of 16.
    const __m128i order = L::NIBBLES ? _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15)
                                     : _mm_setr_epi8(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < scaled; c++) {
            const float* v = x + r * k + Q * c;
            __m512 top = _mm512_setzero_ps();
            for (int h = 0; h < PIECES; h++) top = _mm512_max_ps(top, _mm512_abs_ps(_mm512_loadu_ps(v + 16 * h)));
            const float most = _mm512_reduce_max_ps(top);
            const float d = most / 127.0f, inverse = most > 0.0f ? 127.0f / most : 0.0f;
            int sums[PIECES];
            for (int h = 0; h < PIECES; h++) {  // codes rounded to the nearest, ties to even
                const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(v + 16 * h), _mm512_set1_ps(inverse)));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + at(r, Q * c + 16 * h)),
                                 _mm_shuffle_epi8(_mm512_cvtepi32_epi8(q), order));
                sums[h] = _mm512_reduce_add_epi32(q);
            }
            for (int u = 0; u < Q / L::SUB; u++) {
                const int sum = L::SUB == 16 ? sums[u] : sums[2 * u] + sums[2 * u + 1];
                if (Q == 256)
                    xi[r * subs + c * (Q / L::SUB) + u] = int16_t(sum);
                else
                    xs[r * subs + c * (Q / L::SUB) + u] = d * float(sum);
            }
            dx[r * scaled + c] = d;
        }
}

// Group g (8 inputs) of a chunk's nibble codes (`codes`, the chunk's), as VPDPBUSD and TDPBSSD read them:
// output j's codes of x's inputs 8g to 8g + 3, as x's codes are stored, in dword j of `low`, of 8g + 4
// to 8g + 7 in `high`; Q5's and Q6_K's high bits joined.
template <class L>
inline void quads(const uint8_t* codes, int g, __m512i& low, __m512i& high) {
    const __m512i v = _mm512_loadu_si512(codes + 64 * g);
    low = _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
    high = _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
    if constexpr (L::HIGH > 0) {  // the high bits' fields 2g' and 2g' + 1 of each byte to bit 4 (g' = g % (4 / HIGH))
        const __m512i h = _mm512_loadu_si512(codes + 256 + 64 * (g * L::HIGH / 4));
        const __m512i mask = _mm512_set1_epi8(char(((1 << L::HIGH) - 1) << 4));
        auto to_four = [&](int from) { return from < 4 ? _mm512_slli_epi16(h, 4 - from) : _mm512_srli_epi16(h, from - 4); };
        const int field = L::HIGH * 2 * (g % (4 / L::HIGH));
        low = _mm512_ternarylogic_epi32(low, to_four(field), mask, 0xF8);  // a | (b & c)
        high = _mm512_ternarylogic_epi32(high, to_four(field + L::HIGH), mask, 0xF8);
    }
}

// Sub-block u's sums of one unit's codes times R rows of x's codes: output j's int32 in lane j.
template <class L, int R>
inline void sub_sums(const int8_t* xq, int64_t k, const uint8_t* b, int within, int64_t u, __m512i* sums) {
    const uint8_t* codes = sub_codes<L>(b, within);
    const int64_t c = u * L::SUB / 32;
    for (int r = 0; r < R; r++) sums[r] = _mm512_setzero_si512();
    auto add = [&](__m512i w, int64_t at) {  // x's four codes at `at` of each row's chunk c
        for (int r = 0; r < R; r++)
            sums[r] = _mm512_dpbusd_epi32(sums[r], w, _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xq + r * k + 32 * c + at)));
    };
    if (L::NIBBLES) {
        const int first = first_row<L>(within) / 4;
#pragma GCC unroll 4
        for (int g = first; g < first + L::SUB / 8; g++) {
            __m512i low, high;
            quads<L>(codes, g, low, high);
            add(low, 8 * g);
            add(high, 8 * g + 4);
        }
    } else {
        const int first = first_row<L>(within) / 2;
#pragma GCC unroll 8
        for (int g = first; g < first + L::SUB / 4; g++) {
            const __m512i v = _mm512_loadu_si512(codes + 64 * g);
            add(L::LOW == -128 ? _mm512_xor_si512(v, _mm512_set1_epi8(char(0x80))) : v, 4 * g);
        }
    }
}

// A K-quant block's per-sub-block byte field (Q4_K's minima m_u, Q6_K's sc_u) as int16 pairs of sub-blocks,
// for VPDPWSSD by x's sums.
template <class L>
inline void field_pairs(const uint8_t* b, __m512i* pairs) {
    const uint8_t* field = b + (L::OFFSET ? 192 : 32);
    for (int i = 0; i < L::BLOCK / L::SUB / 2; i++)
        pairs[i] = _mm512_or_si512(_mm512_and_si512(bytes_to_int32(field + 32 * i, !L::OFFSET), _mm512_set1_epi32(0xFFFF)),
                                   _mm512_slli_epi32(bytes_to_int32(field + 32 * i + 16, !L::OFFSET), 16));
}

// A row's a after K-quant block b: `whole`, the block's sum of sc_u (sum of q x)_u, and the field's sum
// with x's sums (`sums_x`, int16 per sub-block), scaled by d and x's scale dx in float32.
template <class L>
inline __m512 block_end(const uint8_t* b, const __m512i* pairs, const int16_t* sums_x, float dx, __m512i whole, __m512 a) {
    __m512i other = _mm512_setzero_si512();
    for (int i = 0; i < L::BLOCK / L::SUB / 2; i++)
        other = _mm512_dpwssd_epi32(other, pairs[i], _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(sums_x + 2 * i)));
    const __m512 scale = _mm512_set1_ps(dx), d = halves(b);
    if constexpr (L::OFFSET) {  // Q4_K: d sc q - dmin m
        a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(whole), _mm512_mul_ps(d, scale), a);
        return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(other), _mm512_mul_ps(halves(b + 32), scale), a);
    } else {  // Q6_K: d sc (q - 32)
        static_assert(L::LOW == -32);
        whole = _mm512_sub_epi32(whole, _mm512_slli_epi32(other, 5));
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(whole), _mm512_mul_ps(d, scale), a);
    }
}

// R rows of quantized x times one unit (16 outputs) into y (a row every n values).
template <class L, int R>
inline void q8_rows(const int8_t* xq, const float* dx, const float* xs, const int16_t* xi, int64_t k,
                    const uint8_t* unit, float* y, int64_t n) {
    constexpr int PER = L::BLOCK / L::SUB;  // sub-blocks a block
    const int64_t subs = k / L::SUB, scaled = k / SCALED<L>;
    __m512 a[R];
    __m512i sums[R];
    for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
    for (int64_t block = 0; block < k / L::BLOCK; block++) {
        const uint8_t* b = unit + block * L::BYTES;
        __m512i whole[R];  // K-quants: the block's sum of sc_u (sum of q x)_u
        for (int r = 0; r < R; r++) whole[r] = _mm512_setzero_si512();
        for (int within = 0; within < PER; within++) {
            const int64_t u = block * PER + within;
            const uint8_t* next = unit + u * L::SUB * L::BYTES / L::BLOCK + (R == PASS ? FAR : AHEAD);
            for (int i = 0; i < L::SUB * L::BYTES / L::BLOCK; i += 64)
                _mm_prefetch(reinterpret_cast<const char*>(next + i), R == PASS ? _MM_HINT_T1 : _MM_HINT_T0);
            sub_sums<L, R>(xq, k, b, within, u, sums);
            if constexpr (L::BLOCK == 256) {
                const __m512i sc = bytes_to_int32(b + (L::OFFSET ? 64 : 32) + 16 * within, !L::OFFSET);
                for (int r = 0; r < R; r++) whole[r] = _mm512_add_epi32(whole[r], _mm512_mullo_epi32(sums[r], sc));
            } else {
                __m512 s, o = _mm512_setzero_ps();
                L::scales(b, within, s, o);
                const __m512 so = _mm512_fmadd_ps(s, _mm512_set1_ps(float(L::LOW)), o);
                for (int r = 0; r < R; r++) {
                    a[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r]), _mm512_mul_ps(s, _mm512_set1_ps(dx[r * scaled + u])), a[r]);
                    a[r] = _mm512_fmadd_ps(so, _mm512_set1_ps(xs[r * subs + u]), a[r]);
                }
            }
        }
        if constexpr (L::BLOCK == 256) {
            __m512i pairs[PER / 2];
            field_pairs<L>(b, pairs);
            for (int r = 0; r < R; r++) a[r] = block_end<L>(b, pairs, xi + r * subs + block * PER, dx[r * scaled + block], whole[r], a[r]);
        }
    }
    for (int r = 0; r < R; r++) _mm512_storeu_ps(y + r * n, a[r]);
}

#ifdef __AMX_TILE__
constexpr int64_t TILED = 32;  // from this many rows, K-quants' blocks go through TDPBSSD (`q8_tiles`): with fewer,
// making the tiles costs what they save

// Block b's weight tiles for TDPBSSD: per 64 inputs s, its 16 rows of four of x's inputs times 16 outputs,
// each weight w = sc_u q (|w| < 2^13) as 128 hi + lo, lo in tiles[s][0] and hi in tiles[s][1] (signed bytes).
template <class L>
inline void int8_tiles(const uint8_t* b, uint8_t (*tiles)[2][1024]) {
    __m512i scales[L::BLOCK / L::SUB];  // sc_u in both 16-bit halves of output j's dword
    for (int u = 0; u < L::BLOCK / L::SUB; u++) {
        const __m512i sc = bytes_to_int32(b + (L::OFFSET ? 64 : 32) + 16 * u, !L::OFFSET);
        scales[u] = _mm512_or_si512(_mm512_and_si512(sc, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(sc, 16));
    }
    const __m512i low = _mm512_set1_epi16(0x00FF), seven = _mm512_set1_epi16(0x7F7F);
    for (int c = 0; c < 8; c++)
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            __m512i quad[2];
            quads<L>(b + L::FIELDS + c * CHUNK<L>, g, quad[0], quad[1]);
            for (int half = 0; half < 2; half++) {
                const __m512i sc = scales[(32 * c + 8 * g + 4 * half) / L::SUB];
                const __m512i even = _mm512_mullo_epi16(_mm512_and_si512(quad[half], low), sc);  // w of bytes 0 and 2
                const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(quad[half], 8), sc);     // of bytes 1 and 3
                // each word's low byte from even, its high byte from odd (0xE4: where c, a, else b)
                const __m512i lo = _mm512_and_si512(_mm512_ternarylogic_epi32(even, _mm512_slli_epi16(odd, 8), low, 0xE4), seven);
                const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srai_epi16(even, 7), _mm512_slli_epi16(_mm512_srai_epi16(odd, 7), 8), low, 0xE4);
                const int row = 8 * (c % 2) + 2 * g + half;
                _mm512_store_si512(tiles[c / 2][0] + 64 * row, lo);
                _mm512_store_si512(tiles[c / 2][1] + 64 * row, hi);
            }
        }
}

// K-quants from TILED rows: each block's sum of w x over its 256 inputs in int32 by TDPBSSD, 128 (hi's)
// + lo's: exactly q8_rows's `whole`, which block_end scales alike. x is padded to a multiple of 16 rows.
template <class L>
void q8_tiles(const int8_t* xq, const float* dx, const int16_t* xi, int64_t m, int64_t rows, int64_t k, const uint8_t* units, int64_t n, float* y) {
    constexpr int PER = L::BLOCK / L::SUB;
    const int64_t blocks = k / L::BLOCK, subs = k / L::SUB, unit_bytes = blocks * L::BYTES;
    alignas(64) uint8_t tiles[4][2][1024];
    alignas(64) int32_t sums[4][16 * 16];
    alignas(64) float acc[ROWS * 16];
    Config c;
    for (int t = 0; t < 8; t++) c.rows[t] = 16, c.colsb[t] = 64;  // m >= TILED: x padded to whole tiles
    asm volatile("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
#pragma omp for schedule(static)
    for (int64_t j = 0; j < n / 16; j++) {
        const uint8_t* unit = units + j * unit_bytes;
        for (int64_t i = 0; i < m * 16; i++) acc[i] = 0.0f;
        for (int64_t block = 0; block < blocks; block++) {
            const uint8_t* b = unit + block * L::BYTES;
            for (int i = 0; i < L::BYTES; i += 64) _mm_prefetch(reinterpret_cast<const char*>(b + L::BYTES + i), _MM_HINT_T0);
            int8_tiles<L>(b, tiles);
            __m512i pairs[PER / 2];
            field_pairs<L>(b, pairs);
            for (int64_t r0 = 0; r0 < m; r0 += 32) {
                const bool two = r0 + 16 < m;
                const int8_t* x = xq + 64 * (block * 4 * rows + r0);  // 64 inputs s at x + 64 rows s
                _tile_zero(0);
                _tile_zero(1);
                if (two) {
                    _tile_zero(2);
                    _tile_zero(3);
                }
                for (int s = 0; s < 4; s++) {
                    _tile_loadd(6, tiles[s][0], 64);
                    _tile_loadd(7, tiles[s][1], 64);
                    _tile_loadd(4, x + 64 * rows * s, 64);
                    _tile_dpbssd(0, 4, 6);
                    _tile_dpbssd(1, 4, 7);
                    if (two) {
                        _tile_loadd(5, x + 64 * (rows * s + 16), 64);
                        _tile_dpbssd(2, 5, 6);
                        _tile_dpbssd(3, 5, 7);
                    }
                }
                _tile_stored(0, sums[0], 64);
                _tile_stored(1, sums[1], 64);
                if (two) {
                    _tile_stored(2, sums[2], 64);
                    _tile_stored(3, sums[3], 64);
                }
                for (int64_t r = r0; r < m && r < r0 + 32; r++) {
                    const int g = int(r - r0) / 16, i = int(r - r0) % 16;
                    const __m512i whole = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(sums[2 * g + 1] + 16 * i), 7),
                                                           _mm512_load_si512(sums[2 * g] + 16 * i));
                    _mm512_store_ps(acc + 16 * r, block_end<L>(b, pairs, xi + r * subs + block * PER, dx[r * blocks + block], whole,
                                                             _mm512_load_ps(acc + 16 * r)));
                }
            }
        }
        for (int64_t r = 0; r < m; r++) _mm512_storeu_ps(y + r * n + 16 * j, _mm512_load_ps(acc + 16 * r));
    }
}
#endif

// Called by every thread of a parallel region; ends with a barrier. On AMX, a prefill (more than ROWS
// rows) takes the tiles' product of x and the weights rounded to bfloat16 (`dense`): three times faster
// than VPDPBUSD there; its rows are alike among themselves, not with a step's. From TILED rows, the
// K-quants' sums come from TDPBSSD: the same integers.
template <class L> struct Q8Product {
    static void run(const float* x, int64_t m, int64_t k, const uint8_t* units, int64_t n, float* y, const Scratch* t) {
        const int64_t scaled = k / SCALED<L>, subs = k / L::SUB, unit_bytes = k / L::BLOCK * L::BYTES;
#ifdef __AMX_TILE__
        if (m > ROWS) return Product<L>::run(x, m, k, units, n, y, t);
        if constexpr (L::BLOCK == 256)
            if (m >= TILED) {
                const int64_t rows = (m + 15) / 16 * 16;
                quantize_rows<L>(x, m, k, rows, t->xq, t->dx, t->xs, t->xi);  // ends with a barrier
                return q8_tiles<L>(t->xq, t->dx, t->xi, m, rows, k, units, n, y);
            }
#endif
        quantize_rows<L>(x, m, k, 0, t->xq, t->dx, t->xs, t->xi);  // ends with a barrier
#pragma omp for schedule(static)
        for (int64_t j = 0; j < n / 16; j++) {
            const uint8_t* unit = units + j * unit_bytes;
            int64_t r = 0;
            auto rows = [&]<int R>() {
                q8_rows<L, R>(t->xq + r * k, t->dx + r * scaled, t->xs + r * subs, t->xi + r * subs, k, unit, y + r * n + 16 * j, n);
                r += R;
            };
            while (r + PASS <= m) rows.template operator()<PASS>();
            if (r + 4 <= m) rows.template operator()<4>();
            if (r + 2 <= m) rows.template operator()<2>();
            if (r < m) rows.template operator()<1>();
        }
    }
};

template <template <class> class F, class... A>
void by_kind(int kind, A... a) {
    switch (kind) {
        case Q4_0: return F<Units<Q4_0>>::run(a...);
        case Q4_1: return F<Units<Q4_1>>::run(a...);
        case Q5_0: return F<Units<Q5_0>>::run(a...);
        case Q5_1: return F<Units<Q5_1>>::run(a...);
        case Q8_0: return F<Units<Q8_0>>::run(a...);
        case Q4_K: return F<Units<Q4_K>>::run(a...);
        case Q6_K: return F<Units<Q6_K>>::run(a...);
    }
}

// Products of x by several matrices in one parallel region (a layer's q, k and v; its gate and up): per
// matrix the table holds its units, outputs n, kind and bias (0 for none: else y + bias, in float32 as
// torch adds it), and its y [m, n] follows the matrix before's in y.
template <template <class> class F>
void linears(const float* x, int64_t m, int64_t k, int64_t count, const int64_t* table, float* y) {
    const Scratch t(m, k);
#pragma omp parallel
    {
        float* out = y;
        for (const int64_t* e = table; e < table + 4 * count; e += 4) {
            const int64_t n = e[1];
            by_kind<F>(int(e[2]), x, m, k, reinterpret_cast<const uint8_t*>(e[0]), n, out, &t);  // ends with a barrier
            if (const float* bias = reinterpret_cast<const float*>(e[3]))
#pragma omp for schedule(static) nowait
                for (int64_t r = 0; r < m; r++)
                    for (int64_t j = 0; j < n; j += 16)
                        _mm512_storeu_ps(out + r * n + j, _mm512_add_ps(_mm512_loadu_ps(out + r * n + j), _mm512_loadu_ps(bias + j)));
            out += m * n;
        }
#ifdef __AMX_TILE__
        _tile_release();
#endif
    }
}

}  // namespace

extern "C" {

#ifdef __AMX_TILE__
// Whether this process may use AMX tiles: Linux grants the tile data state on request (0 where it did).
int amx_request() {
    constexpr long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    return int(syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA));
}
#endif

// x [m, k] float32 times `count` matrices, each [units, n (a multiple of 16), kind, bias] in `table`
// (units: see gguf_bf16.repack; bias: n float32, or 0), into y: matrix s's [m, n_s] after the others'.
void tile_linears(const float* x, int64_t m, int64_t k, int64_t count, const int64_t* table, float* y) {
    linears<Product>(x, m, k, count, table, y);
}

// The same, x quantized to 8 bits per 32 or 256 inputs (--weights gguf-q8).
void q8_linears(const float* x, int64_t m, int64_t k, int64_t count, const int64_t* table, float* y) {
    linears<Q8Product>(x, m, k, count, table, y);
}
}
