/*
 * iwd_trace.h — an event trace of the RDM rendezvous paths, for finding
 * where a transfer's time goes (docs/libfabric.md "Progress while both
 * ranks compute", "Tracing"). Compiled in only with `make -C c -B prov
 * PROV_TRACE=1` (-DIWD_TRACE); otherwise iwd_trace() is nothing at all.
 * At run time IWD_TRACE=DIR turns it on: each process keeps up to 65536
 * events (CLOCK_MONOTONIC ns, name, two numbers) and writes them to
 * DIR/trace.PID when it exits.
 */
#ifndef IWD_TRACE_H
#define IWD_TRACE_H

#include <stdint.h>

#ifdef IWD_TRACE
void iwd_trace_ev(const char *what, uint64_t a, uint64_t b);
/* A progress pass: records prog_gap when the last one is over 200 µs ago. */
void iwd_trace_progress(void);
#define iwd_trace(what, a, b) iwd_trace_ev((what), (uint64_t)(a), (uint64_t)(b))
#else
#define iwd_trace(what, a, b) ((void)0)
#define iwd_trace_progress() ((void)0)
#endif

#endif /* IWD_TRACE_H */
