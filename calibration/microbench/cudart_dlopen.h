/* The CUDA runtime opened with dlopen, so that a microbenchmark builds and runs without CUDA:
 * the library named by the environment variable `env_var` if set, else libcudart.so, then the
 * versioned names of CUDA 13, 12 and 11 and the toolkit's default path. NULL, with the first
 * loader message in `why`, when none opens. */
#pragma once
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void *cudart_dlopen(const char *env_var, char *why, size_t len)
{
	const char *env = getenv(env_var);
	const char *names[] = {env ? env : "libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
	                       "/usr/local/cuda/lib64/libcudart.so"};
	void *h = NULL;
	char first[200] = "";
	for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++) {
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (!h && !first[0])
			snprintf(first, sizeof first, "%s", dlerror());
	}
	if (!h)
		snprintf(why, len, "no CUDA runtime (dlopen: %s)", first);
	return h;
}
