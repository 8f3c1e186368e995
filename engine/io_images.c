/*
 * io_images.c — synthetic images for the ViT experiments: one object of a known class in
 * the centre of a textured background, so that "object patches" and "background patches"
 * (QT's ViT analysis, outliers sitting on uninformative background patches) are defined
 * exactly by the object mask this generator returns.
 *
 * out (3, H, W) f32: colours in [0,1], normalised as (x - 0.5) / 0.25.
 * objmask (H, W) u8: 1 where the object was drawn.
 * Everything is a function of (seed, index) through the engine's counter-based hash.
 */
#include "internal.h"

static const char *class_names[] = { "disc", "square", "plus", "triangle", "ring", "diamond", "x-cross", "frame" };
#define NCLASSES ((int32_t)(sizeof class_names / sizeof class_names[0]))

int32_t ol_image_num_classes(void) { return NCLASSES; }
const char *ol_image_class_name(int32_t c) { return c >= 0 && c < NCLASSES ? class_names[c] : NULL; }

/* is (x, y) — offsets from the object centre in units of its radius, y down — inside? */
static int inside(int32_t cls, float x, float y) {
    float ax = fabsf(x), ay = fabsf(y), r2 = x * x + y * y, m = ax > ay ? ax : ay;
    switch (cls) {
    case 0: return r2 <= 1.0f;                                             /* disc */
    case 1: return m <= 0.85f;                                             /* square */
    case 2: return (ax <= 0.3f && ay <= 1.0f) || (ay <= 0.3f && ax <= 1.0f);   /* plus */
    case 3: return y <= 0.7f && y >= -1.0f && ax <= (y + 1.0f) / 1.7f;     /* triangle, apex up */
    case 4: return r2 <= 1.0f && r2 >= 0.55f * 0.55f;                      /* ring */
    case 5: return ax + ay <= 1.0f;                                        /* diamond */
    case 6: return m <= 0.85f && (fabsf(x - y) <= 0.4f || fabsf(x + y) <= 0.4f); /* x-cross */
    case 7: return m <= 0.9f && m >= 0.55f;                                /* frame */
    }
    return 0;
}

int ol_image_synth(float *out, uint8_t *objmask, int32_t H, int32_t W, int32_t cls,
                   uint64_t seed, uint64_t index) {
    return ol_image_synth_style(out, objmask, H, W, cls, seed, index, 0);
}

/* style 0: the textured background above, the object near the centre (radius 22-32 % of the
 * side). style 1 ("flat", the model organism's images): one uniform background colour, no
 * texture and little noise, so that most patches carry no information, and a smaller object
 * (radius 12-20 %) anywhere in the image: a head that looks for the object has nothing to do
 * on most patches (QT Fig. 3: outliers sit at background patches). */
int ol_image_synth_style(float *out, uint8_t *objmask, int32_t H, int32_t W, int32_t cls,
                         uint64_t seed, uint64_t index, int32_t style) {
    if (style < 0 || style > 1) OL_FAIL_INT("image_synth: style %d is not 0 (textured) or 1 (flat)", style);
    if (!out) OL_FAIL_INT("image_synth: NULL output");
    if (H < 4 || W < 4 || H > 4096 || W > 4096) OL_FAIL_INT("image_synth: size %dx%d out of range [4, 4096]", H, W);
    if (cls < 0 || cls >= NCLASSES) OL_FAIL_INT("image_synth: class %d outside [0, %d)", cls, NCLASSES);
    const uint64_t s = ol__hash64(seed, index);          /* this image's stream */
    uint64_t k = 0;
#define U() ol__u01(s, k++)
    /* colours: a dark and a bright palette; the object takes one, the background the other */
    float dark[3], bright[3], dark2[3];
    for (int c = 0; c < 3; c++) { dark[c] = 0.05f + 0.35f * U(); bright[c] = 0.6f + 0.4f * U(); dark2[c] = 0.05f + 0.35f * U(); }
    const int flip = U() < 0.5f;                          /* 1: dark object on a bright background */
    float obj[3], bg1[3], bg2[3];
    for (int c = 0; c < 3; c++) {
        obj[c] = flip ? dark[c] : bright[c];
        bg1[c] = flip ? bright[c] : dark[c];
        bg2[c] = flip ? 0.5f * (bright[c] + 1.0f) - 0.25f * U() : dark2[c];
    }
    /* texture: 0 noise, 1 stripes, 2 checkerboard */
    const int tex = (int)(U() * 3.0f) % 3;
    const float ang = 3.14159265f * U(), freq = 2.0f + 6.0f * U(), phase = 6.2831853f * U();
    const float ca = cosf(ang), sa = sinf(ang);
    const int cell = 2 + (int)(U() * (float)(W / 6 > 2 ? W / 6 - 1 : 1));
    /* object: centre jittered by up to 6% of the side, radius 22..32% of the shorter side */
    const float mn = (float)(H < W ? H : W);
    float cx = 0.5f * (float)W + (U() - 0.5f) * 0.12f * (float)W;
    float cy = 0.5f * (float)H + (U() - 0.5f) * 0.12f * (float)H;
    float rad = (0.22f + 0.10f * U()) * mn;
    float noise = 0.06f;
    if (style == 1) {
        rad = (0.12f + 0.08f * U()) * mn;
        cx = rad + U() * ((float)W - 2.0f * rad);
        cy = rad + U() * ((float)H - 2.0f * rad);
        noise = 0.01f;
    }
    const uint64_t ns = ol__hash64(s, 0x5eed);           /* pixel noise stream */
    const int64_t HW = (int64_t)H * W;
    for (int32_t i = 0; i < H; i++) {
        for (int32_t j = 0; j < W; j++) {
            const int64_t p = (int64_t)i * W + j;
            const float x = ((float)j + 0.5f - cx) / rad, y = ((float)i + 0.5f - cy) / rad;
            const int in = inside(cls, x, y);
            float mix;   /* background blend between bg1 (0) and bg2 (1) */
            if (style == 1) mix = 0.0f;
            else if (tex == 0) mix = ol__u01(ns, (uint64_t)p);
            else if (tex == 1) mix = 0.5f + 0.5f * sinf(phase + 6.2831853f * freq * ((float)j * ca + (float)i * sa) / (float)W);
            else mix = (float)(((i / cell) + (j / cell)) & 1);
            for (int c = 0; c < 3; c++) {
                float v = in ? obj[c] : bg1[c] + (bg2[c] - bg1[c]) * mix;
                v += noise * (ol__u01(ns, (uint64_t)(HW + 3 * p + c)) - 0.5f);   /* sensor noise */
                v = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
                out[c * HW + p] = (v - 0.5f) / 0.25f;
            }
            if (objmask) objmask[p] = (uint8_t)in;
        }
    }
#undef U
    return 0;
}
