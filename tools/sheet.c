/* The contact sheet of `ringkv rollout` (see sheet.h). */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "sheet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb/stb_easy_font.h>
#include <stb/stb_image_write.h>

#include "../src/atomic_file.h" /* the snapshots' atomic save */
#include "ringkv.h"
#include "world.h"

#define GAP_PX 6
#define TITLE_PX 16 /* the strip of panel titles at the top     */
#define LABEL_PX 14 /* the strip of a row's label above the row  */
#define BACKGROUND 40

static const unsigned char TINT[4][3] = {{40, 200, 60}, {240, 200, 30}, {230, 40, 40}, {0, 0, 0}};
static const unsigned char UNSEEN[3] = {50, 90, 230};
static const unsigned char TEXT[3] = {235, 235, 235};

void sheet_init(sheet *s, camera_view view, int64_t value_dims) {
    memset(s, 0, sizeof *s);
    s->view = view;
    s->value_dims = value_dims;
    s->layer[0] = s->layer[1] = -1;
}

void sheet_free(sheet *s) {
    for (int i = 0; i < s->n_rows; i++) {
        free(s->rows[i].truth);
        free(s->rows[i].recalled[0]);
        free(s->rows[i].recalled[1]);
        free(s->rows[i].band);
    }
    s->n_rows = 0;
}

static float *dup_floats(const float *src, size_t n) {
    float *p = malloc(n * sizeof *p);
    if (p) memcpy(p, src, n * sizeof *p);
    return p;
}

int sheet_add(sheet *s, int64_t frame, const char *label, const float *truth,
              const float *local, const float *global, const int8_t *band) {
    if (s->n_rows == SHEET_MAX_ROWS) return -1;
    size_t T = (size_t)(s->view.rows * s->view.cols), n = T * (size_t)s->value_dims;
    sheet_row *r = &s->rows[s->n_rows];
    r->frame = frame;
    r->label = label;
    r->truth = dup_floats(truth, n);
    r->recalled[0] = dup_floats(local, n);
    r->recalled[1] = dup_floats(global, n);
    r->band = malloc(T);
    if (!r->truth || !r->recalled[0] || !r->recalled[1] || !r->band) {
        free(r->truth);
        free(r->recalled[0]);
        free(r->recalled[1]);
        free(r->band);
        memset(r, 0, sizeof *r);
        return -1;
    }
    memcpy(r->band, band, T);
    s->n_rows++;
    return 0;
}

static unsigned char to_byte(float x) {
    if (!(x > 0.0f)) return 0; /* NaN too */
    if (x >= 1.0f) return 255;
    return (unsigned char)(x * 255.0f + 0.5f);
}

/* Pixel (px, py) of a view panel: value of token (py/8, px/8), pixel
 * (py%8, px%8); 0 for pixels beyond value_dims. */
static float view_pixel(const sheet *s, const float *vals, int64_t px, int64_t py) {
    int64_t t = (py / WORLD_PATCH) * s->view.cols + px / WORLD_PATCH;
    int64_t i = (py % WORLD_PATCH) * WORLD_PATCH + px % WORLD_PATCH;
    return i < s->value_dims ? vals[t * s->value_dims + i] : 0.0f;
}

/* Draws text (stb_easy_font: quads of whole pixels, about 6 pixels a
 * character, 7 high above the baseline) with its top-left corner at (x, y),
 * clipped to the picture. Returns the x after the text. */
static int64_t draw_text(unsigned char *img, int64_t W, int64_t H, int64_t x, int64_t y,
                         const char *text, const unsigned char rgb[3]) {
    static char vbuf[32768]; /* about 270 bytes a character */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", text);
    unsigned char color[4] = {255, 255, 255, 255};
    const int quads = stb_easy_font_print(0.0f, 0.0f, buf, color, vbuf, (int)sizeof vbuf);
    for (int q = 0; q < quads; q++) {
        float v[16]; /* 4 vertices of {x, y, z, rgba} */
        memcpy(v, vbuf + (size_t)q * sizeof v, sizeof v);
        float x0 = v[0], x1 = v[0], y0 = v[1], y1 = v[1];
        for (int k = 1; k < 4; k++) {
            const float vx = v[4 * k], vy = v[4 * k + 1];
            x0 = vx < x0 ? vx : x0;
            x1 = vx > x1 ? vx : x1;
            y0 = vy < y0 ? vy : y0;
            y1 = vy > y1 ? vy : y1;
        }
        for (int64_t py = y + (int64_t)y0; py < y + (int64_t)y1; py++)
            for (int64_t px = x + (int64_t)x0; px < x + (int64_t)x1; px++)
                if (px >= 0 && px < W && py >= 0 && py < H)
                    memcpy(img + 3 * (py * W + px), rgb, 3);
    }
    return x + stb_easy_font_width(buf);
}

/* The picture's pixels (RGB, W x H, malloc'ed), or NULL with a message. */
static unsigned char *render(const sheet *s, int64_t *width, int64_t *height, char *err,
                             size_t err_len) {
    if (s->n_rows == 0) {
        snprintf(err, err_len, "no frame captured for the picture");
        return NULL;
    }
    const int64_t vw = s->view.cols * WORLD_PATCH, vh = s->view.rows * WORLD_PATCH;
    const int64_t scale = vw < 200 ? 2 : 1;
    const int64_t pw = vw * scale, ph = vh * scale;
    const int64_t W = 4 * pw + 5 * GAP_PX, H = TITLE_PX + s->n_rows * (LABEL_PX + ph) + GAP_PX;
    unsigned char *img = malloc((size_t)(W * H * 3));
    if (!img) {
        snprintf(err, err_len, "out of memory for a %lld x %lld-pixel picture (width x height)",
                 (long long)W, (long long)H);
        return NULL;
    }
    memset(img, BACKGROUND, (size_t)(W * H * 3));
    /* titles: what each panel shows */
    char title[64];
    draw_text(img, W, H, GAP_PX, 5, "true view", TEXT);
    for (int c = 0; c < 2; c++) {
        if (s->layer[c] >= 0)
            snprintf(title, sizeof title, "%s recall (layer %lld)", c ? "global" : "local",
                     (long long)s->layer[c]);
        else
            snprintf(title, sizeof title, "%s recall (no such layer)", c ? "global" : "local");
        draw_text(img, W, H, GAP_PX + (c + 1) * (pw + GAP_PX), 5, title, TEXT);
    }
    int64_t tx = draw_text(img, W, H, GAP_PX + 3 * (pw + GAP_PX), 5, "bands:", TEXT);
    static const char *const BAND_WORDS[3] = {" near", " mid", " far"};
    for (int b = 0; b < 3; b++) tx = draw_text(img, W, H, tx, 5, BAND_WORDS[b], TINT[b]);
    draw_text(img, W, H, tx, 5, " unseen", UNSEEN);
    for (int r = 0; r < s->n_rows; r++) {
        const sheet_row *row = &s->rows[r];
        const int64_t y0 = TITLE_PX + r * (LABEL_PX + ph) + LABEL_PX;
        snprintf(title, sizeof title, "frame %lld: %s", (long long)row->frame,
                 row->label ? row->label : "");
        draw_text(img, W, H, GAP_PX, y0 - LABEL_PX + 3, title, TEXT);
        for (int panel = 0; panel < 4; panel++) {
            const int64_t x0 = GAP_PX + panel * (pw + GAP_PX);
            for (int64_t y = 0; y < ph; y++)
                for (int64_t x = 0; x < pw; x++) {
                    int64_t px = x / scale, py = y / scale;
                    unsigned char *o = img + 3 * ((y0 + y) * W + x0 + x);
                    if (panel < 3) {
                        const float *vals = panel == 0 ? row->truth : row->recalled[panel - 1];
                        o[0] = o[1] = o[2] = to_byte(view_pixel(s, vals, px, py));
                        continue;
                    }
                    float l = view_pixel(s, row->truth, px, py);
                    int8_t b = row->band[(py / WORLD_PATCH) * s->view.cols + px / WORLD_PATCH];
                    const unsigned char *tint = b < 0 ? UNSEEN : TINT[b];
                    for (int ch = 0; ch < 3; ch++)
                        o[ch] = b == SHEET_FLAT ? to_byte(l)
                                                : to_byte(0.45f * l + 0.55f * tint[ch] / 255.0f);
                }
        }
    }
    *width = W;
    *height = H;
    return img;
}

/* The legend's text into f (a memory stream). */
static void print_legend(const sheet *s, FILE *f, const char *picture, const char *about) {
    fprintf(f, "%s: the picture of a ringkv rollout (docs/rollout.md)\n%s\n", picture, about);
    fprintf(f,
            "Panels, left to right (each view %lld cols x %lld rows of 8 x 8-pixel cells):\n"
            "  1. true view: what the camera sees at that frame (luma)\n",
            (long long)s->view.cols, (long long)s->view.rows);
    for (int c = 0; c < 2; c++) {
        if (s->layer[c] >= 0)
            fprintf(f,
                    "  %d. %s recall: what layer %lld (the first %s layer) returns for each "
                    "view cell on the\n     frame's first pass: the cell when the ring "
                    "holds it; when not, a mid-grey speckle:\n     the mean of the frame's "
                    "scratch noise, near 0.5, the same 8 x 8 pattern in every\n     cell "
                    "the ring does not hold\n",
                    c + 2, c ? "global" : "local", (long long)s->layer[c],
                    c ? "global" : "local");
        else
            fprintf(f, "  %d. %s recall: empty (the preset has no %s layer)\n", c + 2,
                    c ? "global" : "local", c ? "global" : "local");
    }
    fprintf(f,
            "  4. bands: the true view tinted by how many frames ago each cell was last in "
            "view\n"
            "Band colours (panel 4):\n"
            "  green   near    1-15 frames ago\n"
            "  yellow  mid     16-127 frames ago\n"
            "  red     far     128 or more frames ago\n"
            "  blue    unseen  textured, never in view before\n"
            "  none    flat    no texture (not measured)\n"
            "Rows, top to bottom (session 0; frame clock and the camera's move):\n");
    for (int r = 0; r < s->n_rows; r++)
        fprintf(f, "  %d. frame %lld: %s\n", r + 1, (long long)s->rows[r].frame,
                s->rows[r].label ? s->rows[r].label : "");
    fprintf(f,
            "Moves: pan (on at the same velocity), jump (to new ground), revisit near / mid /\n"
            "far (the path replays what it showed 8, 32-96 or 144 frames earlier).\n");
}

/* stbi_write_png_to_func's callback: the PNG's bytes (all of them, in one
 * call) into the picture's temporary file, the status kept. */
typedef struct png_out {
    rkv__atomic_file *file;
    rkv_status st;
} png_out;

static void png_put(void *ctx, void *data, int size) {
    png_out *o = ctx;
    if (o->st == RKV_OK && size > 0) o->st = rkv__atomic_write(o->file, data, (size_t)size);
}

int sheet_write_files(const sheet *s, const char *png_path, const char *legend_path,
                      const char *picture, const char *about, char *err, size_t err_len) {
    int64_t W = 0, H = 0;
    unsigned char *img = render(s, &W, &H, err, err_len);
    if (!img) return -1;
    char *text = NULL;
    size_t text_len = 0;
    FILE *mem = open_memstream(&text, &text_len);
    if (mem) print_legend(s, mem, picture, about);
    if (!mem || ferror(mem) | fclose(mem)) {
        free(img);
        free(text);
        snprintf(err, err_len, "out of memory for the legend");
        return -1;
    }
    /* the legend's temporary file, then the picture's; both finished (on
     * the disk) before either is renamed: both or neither. `at` is the file
     * of the step under way, named in front of the library's words (which
     * start with its `what`) when the step fails */
    static const char LEGEND[] = "the legend", PICTURE[] = "the picture";
    rkv__atomic_file legend = {.fd = -1}, pic = {.fd = -1}, *at = &legend;
    png_out out = {&pic, RKV_OK};
    rkv_status st = rkv__atomic_begin(&legend, LEGEND, legend_path);
    if (st == RKV_OK) st = rkv__atomic_write(&legend, text, text_len);
    if (st == RKV_OK) st = rkv__atomic_begin(at = &pic, PICTURE, png_path);
    int encoded = 1;
    if (st == RKV_OK) {
        encoded = stbi_write_png_to_func(png_put, &out, (int)W, (int)H, 3, img, (int)(W * 3));
        st = out.st;
    }
    rkv__atomic_file *const last[4] = {&legend, &pic, &pic, &legend}; /* finish, commit */
    for (int k = 0; k < 4 && st == RKV_OK && encoded; k++)
        st = k < 2 ? rkv__atomic_finish(at = last[k]) : rkv__atomic_commit(at = last[k]);
    const char *failed = at == &legend ? LEGEND : PICTURE;
    const char *failed_path = at == &legend ? legend_path : png_path;
    if (!encoded && st == RKV_OK)
        snprintf(err, err_len, "cannot write the picture '%s': out of memory for the PNG encoder",
                 png_path);
    else if (st != RKV_OK) {
        const char *why = rkv_last_error();
        const size_t n = strlen(failed);
        if (!strncmp(why, failed, n) && why[n] == ':' && why[n + 1] == ' ')
            why += n + 2; /* after "WHAT: " */
        snprintf(err, err_len, "cannot write %s '%s': %s", failed, failed_path, why);
    }
    rkv__atomic_abort(&legend);
    rkv__atomic_abort(&pic);
    free(img);
    free(text);
    return st == RKV_OK && encoded ? 0 : -1;
}
