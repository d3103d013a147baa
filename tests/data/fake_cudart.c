/* A stand-in for the few CUDA runtime calls hostalloc_stall makes, on the CPU, so that a machine
 * without a GPU can check what the benchmark reports (tests/test_hostalloc_stall.py). One
 * "device" thread runs the operations of every stream in submission order, each taking
 * FAKE_CUDA_OP_US microseconds (default 1000) of a device clock: an entry starts when the previous
 * one ends or when it was submitted, whichever is later, so that the host's scheduling delays do
 * not stretch the device's timeline; events take that clock when the device reaches them, and
 * become complete when the host clock passes it. cudaHostAlloc and cudaFreeHost take
 * FAKE_CUDA_ALLOC_US (default 20000); with FAKE_CUDA_STALL=1 they hold the device meanwhile (it
 * starts nothing until the call ends), otherwise it keeps running. Error codes: 0 success, 1
 * failure. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

struct event {
	volatile int done;
	double t;
};

#define QCAP 4096
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int started, held;
	double clock, hold_begin, hold_end; /* device clock: end of the last entry; the last hold */
	struct {
		double busy;          /* seconds of work, 0 for an event */
		double submitted;     /* host clock at submission */
		struct event *event;  /* the event this entry records, or NULL */
	} q[QCAP];
	unsigned head, tail;
	pthread_t th;
} dev = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, {{0, 0, 0}}, 0, 0, 0};

static double env_s(const char *name, double dflt_us)
{
	const char *v = getenv(name);
	return (v ? atof(v) : dflt_us) * 1e-6;
}

static void *device_main(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&dev.lock);
		while (dev.head == dev.tail || dev.held)
			pthread_cond_wait(&dev.cond, &dev.lock);
		double busy = dev.q[dev.head % QCAP].busy, submitted = dev.q[dev.head % QCAP].submitted;
		struct event *e = dev.q[dev.head % QCAP].event;
		double start = dev.clock > submitted ? dev.clock : submitted;
		if (dev.hold_end > 0 && dev.hold_begin <= start && start < dev.hold_end)
			start = dev.hold_end; /* the entry would have started during the hold */
		dev.clock = start + busy;
		pthread_mutex_unlock(&dev.lock);
		if (dev.clock > now())
			sleep_s(dev.clock - now());
		pthread_mutex_lock(&dev.lock);
		if (e) {
			e->t = start;
			e->done = 1;
		}
		dev.head++;
		pthread_cond_broadcast(&dev.cond);
		pthread_mutex_unlock(&dev.lock);
	}
	return NULL;
}

static int push(double busy, struct event *e)
{
	pthread_mutex_lock(&dev.lock);
	if (!dev.started) {
		dev.started = 1;
		pthread_create(&dev.th, NULL, device_main, NULL);
	}
	while (dev.tail - dev.head >= QCAP)
		pthread_cond_wait(&dev.cond, &dev.lock);
	dev.q[dev.tail % QCAP].busy = busy;
	dev.q[dev.tail % QCAP].submitted = now();
	dev.q[dev.tail % QCAP].event = e;
	if (e)
		e->done = 0;
	dev.tail++;
	pthread_cond_broadcast(&dev.cond);
	pthread_mutex_unlock(&dev.lock);
	return 0;
}

int cudaGetDeviceCount(int *n) { *n = 1; return 0; }
int cudaSetDevice(int d) { (void)d; return 0; }
int cudaMalloc(void **p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 1; }
int cudaFree(void *p) { free(p); return 0; }
int cudaStreamCreateWithFlags(void **s, unsigned f) { (void)f; *s = &dev; return 0; }
int cudaMemsetAsync(void *p, int v, size_t n, void *s) { (void)p; (void)v; (void)n; (void)s; return push(env_s("FAKE_CUDA_OP_US", 1000), NULL); }
int cudaMemcpyAsync(void *d, const void *src, size_t n, int k, void *s) { (void)d; (void)src; (void)n; (void)k; (void)s; return push(env_s("FAKE_CUDA_OP_US", 1000), NULL); }
int cudaEventCreate(void **e) { *e = calloc(1, sizeof(struct event)); return *e ? 0 : 1; }
int cudaEventRecord(void *e, void *s) { (void)s; return push(0, e); }
int cudaEventSynchronize(void *e)
{
	pthread_mutex_lock(&dev.lock);
	while (!((struct event *)e)->done)
		pthread_cond_wait(&dev.cond, &dev.lock);
	pthread_mutex_unlock(&dev.lock);
	return 0;
}
int cudaStreamSynchronize(void *s)
{
	(void)s;
	pthread_mutex_lock(&dev.lock);
	while (dev.head != dev.tail)
		pthread_cond_wait(&dev.cond, &dev.lock);
	pthread_mutex_unlock(&dev.lock);
	return 0;
}
int cudaEventElapsedTime(float *ms, void *a, void *b)
{
	*ms = (float)((((struct event *)b)->t - ((struct event *)a)->t) * 1e3);
	return 0;
}
const char *cudaGetErrorString(int e) { return e ? "fake failure" : "no error"; }

static int hold(void)
{
	const char *stall = getenv("FAKE_CUDA_STALL");
	int h = stall && atoi(stall);
	if (h) {
		pthread_mutex_lock(&dev.lock);
		dev.held++;
		dev.hold_begin = now();
		dev.hold_end = 0;
		pthread_mutex_unlock(&dev.lock);
	}
	sleep_s(env_s("FAKE_CUDA_ALLOC_US", 20000));
	if (h) {
		pthread_mutex_lock(&dev.lock);
		dev.held--;
		dev.hold_end = now();
		pthread_cond_broadcast(&dev.cond);
		pthread_mutex_unlock(&dev.lock);
	}
	return 0;
}

int cudaHostAlloc(void **p, size_t n, unsigned f)
{
	(void)f;
	*p = malloc(n ? n : 1);
	return *p ? hold() : 1;
}
int cudaFreeHost(void *p) { free(p); return hold(); }
