#include "base/cpulevel.h"

int cpulevel_force(int *forced, int have, int level)
{
	int was = cpulevel_get(forced, have);
	if (level >= 0)
		*forced = level < have ? level : have;
	return was;
}

int cpulevel_get(const int *forced, int have)
{
	return *forced >= 0 ? *forced : have;
}
