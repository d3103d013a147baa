/* fxt_events: every event of StarPU FxT trace files, one line each, for the testbed's counters
 * (testbed/traces/fxt_events.py). starpu_fxt_tool's outputs drop the id of the thread that
 * recorded an event (its Paje states put a copy on the destination's memory manager,
 * src/debug/traces/starpu_fxt.c handle_start_driver_copy), and that id is what says which
 * thread ran a copy. This program reads the files with FxT's own reader, as starpu_fxt_tool
 * does (starpu_fxt.c _starpu_fxt_parse_new_file: fxt_fdopen, fxt_blockev_enter, fxt_next_ev
 * with FXT_EV_TYPE_64), and prints
 *
 *     <file index> <time ns> <thread id> <code, hex> <nb params> <param>...
 *
 * separated by tabs, parameters in decimal. It decodes nothing: the codes are StarPU's
 * (src/common/fxt.h). Usage: fxt_events FILE... ; exit 2 on a file it cannot open. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <fxt/fxt.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "error: fxt_events: expected FxT trace files (fxt_events FILE...)\n");
		return 2;
	}
	for (int f = 1; f < argc; f++) {
		int fd = open(argv[f], O_RDONLY);
		if (fd < 0) {
			fprintf(stderr, "error: %s: %s\n", argv[f], strerror(errno));
			return 2;
		}
		fxt_t fut = fxt_fdopen(fd);
		if (!fut) {
			fprintf(stderr, "error: %s: expected an FxT trace file\n", argv[f]);
			close(fd);
			return 2;
		}
		fxt_blockev_t block = fxt_blockev_enter(fut);
		struct fxt_ev_64 ev;
		while (fxt_next_ev(block, FXT_EV_TYPE_64, (struct fxt_ev *)&ev) == FXT_EV_OK) {
			printf("%d\t%llu\t%llu\t%llx\t%u", f - 1, (unsigned long long)ev.time,
			       (unsigned long long)ev.user.tid, (unsigned long long)ev.code, ev.nb_params);
			for (unsigned i = 0; i < ev.nb_params && i < FXT_MAX_PARAMS; i++)
				printf("\t%llu", (unsigned long long)ev.param[i]);
			putchar('\n');
		}
		fxt_blockev_leave(block);
		fxt_close(fut);
	}
	return fflush(stdout) == 0 ? 0 : 1;
}
