/* cpulevel: which level of a set of kernels runs (0 portable, higher ones faster, as the CPU
 * has them), and a test's way to force one so that every level is checked to give the same
 * floats. Each set of kernels (convolutions, the rules' passes, the CRC) keeps its own forced
 * level; this module owns the logic. */
#ifndef GEM_CPULEVEL_H
#define GEM_CPULEVEL_H

/* Force *forced (-1: none) to level (-1 only asks); have is what the CPU has, and a level
 * above it becomes have. Returns the level in use before. */
int cpulevel_force(int *forced, int have, int level);
/* The level in use: *forced's, or have. */
int cpulevel_get(const int *forced, int have);
#endif
