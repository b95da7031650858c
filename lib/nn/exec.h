/* exec: an external model (gem-exec(7)): a program gem runs as a child and asks, one line of
 * JSON per request on a pipe, for its layout, θ₀, the loss and gradient of a batch, and an
 * evaluation. θ, the gradient and a batch's sample indices lie in a memfd both processes map,
 * so that nothing of θ's size crosses the pipe. Every reply is hostile until checked: a child
 * that crashes, hangs, answers garbage or the wrong sizes fails the request with a message that
 * names it and the request, and is killed with its process group. */
#ifndef GEM_EXEC_H
#define GEM_EXEC_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/layout.h"

#define EXEC_PREFIX "exec:"          /* --model exec:CMD */
#define EXEC_PROTOCOL 1
#define EXEC_LINE_MAX 65536          /* a request or reply line, its newline included */
#define EXEC_TIMEOUT_DEFAULT 60.0    /* seconds a request may take */
#define EXEC_TIMEOUT_MAX 86400.0
#define EXEC_START_TIMEOUT 120.0     /* seconds the hello may take at least: the program starts */
#define EXEC_CMD_MAX 1024
#define EXEC_MAX_COUNT ((uint64_t)INT32_MAX) /* train, test: samples or tokens */
#define EXEC_MAX_POSITIONS 65536

/* What a child says of itself (its hello), as run.json's model records it. */
struct exec_info {
	char cmd[EXEC_CMD_MAX];
	double timeout;
	char name[64];
	struct layout layout;
	int classes;
	uint64_t train, test; /* samples, or a text's tokens (positions > 0) */
	int positions;        /* a language model's window T; 0: samples */
};

/* A hello reply's members (line: len bytes, no NUL needed) into info's model fields (cmd and
 * timeout untouched); GEM_EUSAGE naming what is wrong. make_fuzz's entry. */
int exec_parse_hello(const char *line, size_t len, struct exec_info *info, char *err);
/* Any reply line as a JSON object (*out, new reference); a reply {"error": MSG} is GEM_EFAIL
 * with MSG (its printable bytes). */
int exec_parse_reply(const char *line, size_t len, json_t **out, char *err);
/* run.json's model of an external model, both ways: {"exec": CMD, "timeout": T, "name": ...,
 * "classes": C, "tensors": [[NAME, [D...]], ...], "train": N, "test": M, "positions": T}. */
json_t *exec_info_to_json(const struct exec_info *info);
int exec_info_from_json(const json_t *spec, struct exec_info *info, char *err);
/* Whether a and b are the same model and data; GEM_EUSAGE saying the first difference. */
int exec_info_same(const struct exec_info *recorded, const struct exec_info *child, char *err);

/* The shared memory of one external model: θ and the gradient, mapped from creation on (their
 * addresses never change), and room for cap sample indices after them. */
struct exec_shm {
	int fd;
	size_t n;              /* floats of θ */
	float *theta, *grad;   /* grad = theta + grad_off / 4 */
	size_t grad_off, index_off, size;
	uint64_t *index;       /* mapped separately (index_off is page-aligned), grows */
	int cap;
};
/* The memory, empty (a child can be given it before θ's size is known), then sized for n
 * floats of θ and as many of the gradient, zeroed. */
int exec_shm_create(struct exec_shm *s, char *err);
int exec_shm_size(struct exec_shm *s, size_t n, char *err);
/* Room for at least cap indices. */
int exec_shm_reserve(struct exec_shm *s, int cap, char *err);
void exec_shm_close(struct exec_shm *s);

struct exec_child;

/* Start info->cmd with s as its descriptor 3, say hello, check that it is the model info
 * records (its cmd's; info->layout.ntensors == 0: take the child's word into info instead, and
 * size s for it), and map s. */
int exec_start(struct exec_info *info, struct exec_shm *s, struct exec_child **out, char *err);
/* "exec model 'CMD' (pid N)": how messages name the child. */
const char *exec_label(const struct exec_child *c);
/* Tell the child s's size again after exec_shm_reserve grew it. */
int exec_remap(struct exec_child *c, const struct exec_shm *s, char *err);
int exec_init(struct exec_child *c, uint64_t seed, char *err);
/* A batch: n indices already in the shared memory, and who asks (gem-exec(7), grad). */
struct exec_batch {
	int n, worker, part_i, part_n;
	uint64_t position, seed;
};
int exec_grad(struct exec_child *c, const struct exec_batch *b, float *loss, char *err);
int exec_eval(struct exec_child *c, double *loss, uint64_t *count, long long *correct, char *err);
/* n token ids in the shared memory's index: the next token's log-probabilities into its grad. */
int exec_predict(struct exec_child *c, int n, char *err);
/* Close the child's input, give it 2 s to exit, then kill its process group; reap it and stop
 * relaying its standard error. NULL: nothing. */
void exec_stop(struct exec_child *c);
#endif
