/* grow: the one way libgem grows a buffer or an array that fills as it goes (a message, an HTTP
 * body, a log's rows): doubling from a first capacity, so that n appends cost O(n) copies, and
 * never past what size_t can count. */
#ifndef GEM_GROW_H
#define GEM_GROW_H
#include <stddef.h>

/* *p (an array of *cap elements of size bytes; NULL when *cap is 0) made to hold at least need
 * elements: doubled from first (or *cap) until it does; *p and *cap updated. 0, or GEM_ENOMEM
 * (out of memory, or need elements overflow size_t), *p and *cap unchanged. */
int grow_array(void *p, size_t *cap, size_t need, size_t size, size_t first);
#endif
