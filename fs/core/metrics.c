/* metrics.c - the catalogue of what .epochfs/ shows: every sample's name,
 * help text and source, in one place (core_samples), rendered twice by
 * stats.c (stats.json, Prometheus metrics) so the two never drift.
 *
 * The counters themselves are incremented where their events happen (the
 * read path, the peers, the cache); this file only reads them, with
 * relaxed loads, when a control file is looked up.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/aside.h"
#include "core/core_int.h"
#include "core/ns/order.h"
#include "core/ns/prepdir.h"
#include "core/prefetch.h"
#include "core/memory.h"
#include "core/watch.h"
#include "store/cache.h"
#include "store/index.h"
#include "store/persist.h"
#include "store/staging.h"
#include "store/storage.h"
#include "store/tier.h"
#include "util/version.h"

int core_render(void *arg, enum control_file f, char *buf, size_t len)
{
	struct sample v[CORE_MAX_SAMPLES];
	int n = core_samples(arg, v, CORE_MAX_SAMPLES);

	return f == CONTROL_STATS_JSON ? stats_render_json(v, n, buf, len)
				       : stats_render_prom(v, n, buf, len);
}

int core_render_http(void *arg, const char *path, char *buf, size_t len, const char **type)
{
	struct core *c = arg;

	if (!strcmp(path, "/metrics")) {
		*type = "text/plain; version=0.0.4; charset=utf-8";
		return core_render(c, CONTROL_METRICS, buf, len);
	}
	if (!strcmp(path, "/stats.json")) {
		*type = "application/json";
		return core_render(c, CONTROL_STATS_JSON, buf, len);
	}
	if (!strcmp(path, "/")) {
		int n = snprintf(buf, len, "epochfs %s serving %s: /metrics (Prometheus), /stats.json\n",
				 EPOCHFS_VERSION, c->source);
		return n < 0 || (size_t)n >= len ? -ENOSPC : n;
	}
	return -ENOENT;
}

int core_samples(struct core *c, struct sample *out, int max)
{
	struct index_totals t;
	struct storage_stats ss;
	int n = 0;

	index_totals(c->ix, &t);
	storage_get_stats(c->st, &ss);
#define GAUGE(nm, hp, val) \
	if (n < max) out[n++] = (struct sample){ .name = nm, .help = hp, .kind = SAMPLE_GAUGE, .u = (val) }
#define COUNTER(nm, hp, val) \
	if (n < max) out[n++] = (struct sample){ .name = nm, .help = hp, .kind = SAMPLE_COUNTER, .u = (val) }
	if (n < max)
		out[n++] = (struct sample){ .name = "version", .help = "Release of the daemon serving this mount",
					    .kind = SAMPLE_INFO, .text = EPOCHFS_VERSION };
	GAUGE("daemon_pid", "Process ID of the daemon serving this mount", (uint64_t)getpid());
	if (n < max)
		out[n++] = (struct sample){ .name = "source", .help = "The directory this mount serves (SOURCE)",
					    .kind = SAMPLE_INFO, .text = c->source };
	if (n < max)
		out[n++] = (struct sample){ .name = "mountpoint", .help = "Where it is mounted",
					    .kind = SAMPLE_INFO, .text = c->mountpoint ? c->mountpoint : "" };
	if (n < max)
		out[n++] = (struct sample){ .name = "options", .help = "The options in force",
					    .kind = SAMPLE_INFO, .text = c->options };
	const char *pt = __atomic_load_n(&c->passthrough, __ATOMIC_ACQUIRE);
	const char *pa = __atomic_load_n(&c->pt_avail, __ATOMIC_ACQUIRE);
	if (n < max)
		out[n++] = (struct sample){ .name = "passthrough", .kind = SAMPLE_INFO,
					    .help = "Whether the kernel reads the files the RAM cache holds whole "
						    "straight from it (FUSE passthrough): on, or off and why",
					    .text = pt ? pt : "unknown: the kernel has not connected yet" };
	if (n < max)
		out[n++] = (struct sample){ .name = "passthrough_available", .kind = SAMPLE_INFO,
					    .help = "Whether this kernel and daemon could use FUSE passthrough: "
						    "yes, or no and why",
					    .text = pa ? pa : "unknown: the kernel has not connected yet" };
	GAUGE("passthrough_open_files", "Files open now whose reads the kernel serves from the RAM cache",
	      core_pt_open_files(c));
	struct aside *as = __atomic_load_n(&c->aside, __ATOMIC_ACQUIRE);
	struct aside_policy ap = { 0 };
	if (as)
		aside_get(as, &ap);
	if (n < max)
		out[n++] = (struct sample){ .name = "stand_aside", .kind = SAMPLE_INFO,
					    .help = "Whether the cache stands aside where it does not make the job "
						    "faster: its phase (warming, serving, trial, aside), or off and why",
					    /* aside_why is written before passthrough is published */
					    .text = as ? aside_phase_name(ap.phase)
						: pt && c->aside_why[0] ? c->aside_why
						: "off: the kernel has not connected yet" };
	COUNTER("aside_trials", "Trials of the job's opens with and without the cache", ap.trials);
	COUNTER("aside_stood", "Times the cache stood aside (it did not make the job faster)", ap.stood);
	COUNTER("aside_came_back", "Times the cache came back from aside (the job slowed)", ap.came_back);
	GAUGE("aside_cache_gap_ns", "The last trial: the job's time between opens, served from the cache",
	      (uint64_t)(ap.cache_gap * 1e9));
	GAUGE("aside_source_gap_ns", "The last trial: the job's time between opens, read from SOURCE",
	      (uint64_t)(ap.source_gap * 1e9));
	if (n < max)
		out[n++] = (struct sample){ .name = "cache_spread", .kind = SAMPLE_INFO,
					    .help = "Whether a RAM cache smaller than the dataset holds an even "
						    "share of each large file (on, the share) or large files whole, "
						    "first come (off, and why)",
					    .text = c->spread_text[0] ? c->spread_text : "off: no RAM cache" };
	GAUGE("cache_spread_share_ppm", "The share of each large file the RAM cache admits now, in "
	      "millionths (0: whole files, first come)",
	      (uint64_t)((__atomic_load_n(&c->spread, __ATOMIC_RELAXED) * 1000000u) >> 32));
	const char *tr = __atomic_load_n(&c->transport, __ATOMIC_ACQUIRE);
	if (n < max)
		out[n++] = (struct sample){ .name = "fuse_transport", .kind = SAMPLE_INFO,
					    .help = "How the kernel's requests reach the daemon: io_uring, or "
						    "dev (/dev/fuse) and why",
					    .text = tr ? tr : "unknown: the kernel has not connected yet" };
	GAUGE("request_slice_ns", "The CPU time slice the FUSE request threads run with, when they asked "
	      "for one (--request-slice); 0: the kernel's default",
	      __atomic_load_n(&c->request_slice_ns, __ATOMIC_RELAXED));
	GAUGE("readahead_bytes", "The readahead window the daemon set on the mount (--readahead); 0: "
	      "the kernel's own",
	      __atomic_load_n(&c->readahead_bytes, __ATOMIC_RELAXED));
	GAUGE("files", "Regular files in the index", t.files);
	GAUGE("dirs", "Directories in the index", t.dirs);
	GAUGE("symlinks", "Symbolic links in the index", t.symlinks);
	GAUGE("bytes_total", "Sum of the sizes of the indexed files", t.bytes);
	GAUGE("index_bytes", "Memory held by the index", index_memory(c->ix));
	GAUGE("watched_dirs", "Directories watched for changes", watch_count(c->watch));
	COUNTER("storage_read_bytes", "Bytes the daemon read from SOURCE", ss.bytes);
	COUNTER("storage_reads", "Reads the daemon issued to SOURCE", ss.reads);
	COUNTER("storage_errors", "Reads of SOURCE that failed", ss.errors);
	COUNTER("storage_inline_reads", "Reads of SOURCE served at once from its page cache", ss.inline_reads);
	struct cache_stats cs = { 0 };
	if (c->cache)
		cache_get_stats(c->cache, &cs);
	GAUGE("cache_capacity_bytes", "Byte budget of the RAM cache", cs.capacity);
	GAUGE("cache_used_bytes", "Bytes of the budget in use", cs.used);
	GAUGE("cache_items", "Items ready in the RAM cache", cs.items);
	COUNTER("cache_hits", "Reads served from (or waiting on) a cached item", cs.hits);
	COUNTER("cache_misses", "Reads that found no cached item", cs.misses);
	COUNTER("cache_corrupt", "Cached items dropped for a checksum mismatch", cs.corrupt);
	COUNTER("cache_stale", "Cached items dropped because their file changed", cs.stale);
	COUNTER("cache_full", "Items not admitted: budget spent", cs.full);
	COUNTER("cache_scrubbed_bytes", "Bytes the background scrubber re-checked", cs.scrubbed_bytes);
	COUNTER("cache_scrub_passes", "Full passes of the scrubber over the cache", cs.scrub_passes);
	GAUGE("cache_prefaulted_bytes", "Arena bytes made resident ahead of the fill", cs.prefaulted);
	GAUGE("cache_limit_bytes", "Admissions stop here: the capacity, less while memory is tight", cs.limit);
	COUNTER("cache_given_back_bytes", "Cache bytes given back to the kernel under memory pressure",
		cs.given_back);
	COUNTER("cache_given_back_items", "Cached items dropped with them", cs.given_back_items);
	COUNTER("cache_no_space", "Items not admitted: the state directory's tmpfs is full", cs.no_space);
	GAUGE("cache_backed_files", "Large files whose cached items live in a memfd of their own", cs.backed_files);
	GAUGE("cache_backed_bytes", "Bytes of those files", cs.backed_bytes);
	GAUGE("cache_backed_whole", "Of those files, the ones held whole (an open may be served by passthrough)",
	      c->cache ? cache_backed_whole(c->cache) : 0);
	GAUGE("cache_backing_space_bytes", "Budget charged to those memfds (part of cache_used_bytes)",
	      cs.backing_space);
	COUNTER("cache_backings_made", "Memfds made for large files", cs.backings_made);
	COUNTER("cache_backings_retired", "Memfds retired: their file changed, an item failed its checksum",
		cs.backings_retired);
	COUNTER("cache_backing_failures", "Memfds that could not be made (the file went to the arena)",
		cs.backing_failures);
	struct persist_stats pst = { 0 };
	if (c->persist)
		persist_get_stats(c->persist, &pst);
	GAUGE("persist", "1 when the RAM cache lives in a state directory that outlives the daemon",
	      c->persist != NULL);
	if (n < max)
		out[n++] = (struct sample){ .name = "persist_state", .kind = SAMPLE_INFO,
					    .help = "Where the RAM cache's state lives and when it is kept, or why "
						    "there is none",
					    .text = c->cache ? c->persist_why : "off: no RAM cache" };
	GAUGE("persist_found", "1 when a previous daemon's state was there at mount", (uint64_t)pst.found);
	GAUGE("persist_dropped_unverified", "Recorded items not adopted: made without this --manifest, and "
	      "not matching it", pst.dropped_unverified);
	GAUGE("persist_discarded", "1 when that state was discarded whole (another SOURCE, chunk size or "
	      "format, a corrupt header; the log says which)", (uint64_t)(pst.discarded[0] != 0));
	GAUGE("persist_records", "Item records the state's table held at mount", pst.records);
	GAUGE("persist_adopted", "Items adopted from the previous daemon's state", pst.adopted);
	GAUGE("persist_adopted_bytes", "Bytes of them", pst.adopted_bytes);
	GAUGE("persist_dropped_changed", "Recorded items not adopted: their file changed in or left SOURCE",
	      pst.dropped_changed);
	GAUGE("persist_dropped_corrupt", "Recorded items not adopted: their bytes fail their checksum",
	      pst.dropped_corrupt);
	GAUGE("persist_dropped_other", "Recorded items not adopted: void after memory was given back, "
	      "outside the arena, overlapping or duplicated", pst.dropped_other);
	GAUGE("persist_dropped_bytes", "Bytes of the recorded items not adopted", pst.dropped_bytes);
	GAUGE("persist_moved", "Adopted items moved down over the space of dropped ones", pst.moved);
	GAUGE("persist_torn_bytes", "Bytes at the table's end that did not parse (a torn or corrupt record)",
	      pst.torn_bytes);
	COUNTER("persist_record_errors", "Items that could not be recorded in the table (served, not kept)",
		pst.record_errors);
	struct tier_stats ts = { 0 };
	if (c->tier)
		tier_get_stats(c->tier, &ts);
	GAUGE("tier_dirs", "Directories of the SSD tier (--cache-dir)", ts.dirs);
	GAUGE("tier_dirs_down", "Of them, admitting nothing more (vanished, read-only, failed write, floor)",
	      ts.dirs_down);
	GAUGE("tier_capacity_bytes", "Byte budget of the SSD tier (all directories)", ts.capacity);
	GAUGE("tier_used_bytes", "Bytes of it taken (4 KiB per item boundary)", ts.used);
	GAUGE("tier_items", "Items ready in the SSD tier", ts.items);
	COUNTER("tier_hits", "Reads served from the SSD tier", ts.hits);
	COUNTER("tier_hit_bytes", "Bytes returned to readers from the SSD tier", ts.hit_bytes);
	COUNTER("tier_admitted", "Items written to the SSD tier", ts.admitted);
	COUNTER("tier_admitted_bytes", "Bytes of them", ts.admitted_bytes);
	COUNTER("tier_full", "Items the SSD tier did not take: budget spent, floor reached or writes queued",
		ts.full);
	COUNTER("tier_read_errors", "SSD tier reads that failed (the item dropped, read from the next source)",
		ts.read_errors);
	COUNTER("tier_write_errors", "SSD tier writes that failed (that directory then admits nothing)",
		ts.write_errors);
	COUNTER("tier_corrupt", "SSD tier items dropped for a checksum mismatch", ts.corrupt);
	COUNTER("tier_stale", "SSD tier items dropped because their file changed", ts.stale);
	GAUGE("tier_adopted", "SSD tier items adopted from the previous daemon", ts.adopted);
	GAUGE("tier_adopted_bytes", "Bytes of them", ts.adopted_bytes);
	GAUGE("tier_dropped", "SSD tier records not adopted (changed files, void, duplicates)", ts.dropped);
	GAUGE("tier_direct", "1 when every tier directory is read with O_DIRECT", (uint64_t)ts.direct);
	struct memory_stats ms = { 0 };
	if (c->memory)
		memory_get_stats(c->memory, &ms);
	GAUGE("mem_limit_bytes", "Memory the daemon's cgroup (or machine) may use", ms.limit);
	GAUGE("mem_room_bytes", "Of it, what is left: limit - anonymous, shared and mapped memory", ms.room);
	GAUGE("mem_mapped_bytes", "Of the used memory, files mapped by processes (a job's libraries): "
	      "reclaimable, at a refault each", ms.mapped);
	GAUGE("mem_refaults_per_s", "File pages read back soon after the kernel evicted them", ms.refaults_per_s);
	GAUGE("mem_state", "0 calm (the cache admits), 1 paused (no admission), 2 giving back", ms.state);
	GAUGE("mem_drop_page_cache", "1 while files' kernel copies are dropped once read", ms.drop_copies);
	COUNTER("mem_pauses", "Times the cache stopped admitting for lack of memory", ms.pauses);
	GAUGE("mem_own_bytes", "The daemon's own anonymous and shared memory", ms.own);
	GAUGE("mem_job_peak_bytes", "The most the rest of its cgroup (the job) has used, decaying", ms.job_peak);
	GAUGE("mem_job_max_bytes", "The most the rest of its cgroup was seen to use", ms.job_max);
	GAUGE("mem_job_batches_bytes", "Bytes of batches the jobs' loaders said they may hold at once "
	      "(counted in the job's peak)", ms.job_batches);
	GAUGE("mem_own_max_bytes", "The most the daemon's own memory was seen to be", ms.own_max);
	GAUGE("mem_ceiling_bytes", "What the daemon's own memory may reach: limit - job peak - margin",
	      ms.ceiling);
	COUNTER("mem_guard_gives", "Times the cache gave back at once, the daemon over its ceiling",
		ms.guard_gives);
	COUNTER("aside_given_bytes", "Bytes of cache given back to stand aside", ms.aside_given);
	struct prefetch_stats fs = { 0 };
	struct order_stats os = { 0 };
	struct staging_stats ss2 = { 0 };
	if (c->pf)
		prefetch_get_stats(c->pf, &fs);
	if (c->order)
		order_get_stats(c->order, &os);
	if (c->staging)
		staging_get_stats(c->staging, &ss2);
	GAUGE("order_streams", "Orders written to .epochfs/order/ being followed", os.streams);
	GAUGE("order_places", "Paths held in all orders (at most 16M)", os.places);
	COUNTER("order_paths", "Paths taken into orders", os.paths);
	COUNTER("order_unknown", "Order paths no indexed file has (skipped)", os.unknown);
	COUNTER("prefetch_bytes", "Bytes fetched ahead of the readers (into a cache or staging)",
		fs.fetched_bytes);
	COUNTER("prefetch_cached_bytes", "Of prefetch_bytes, kept by the RAM cache or the SSD tier", fs.cached_bytes);
	COUNTER("prefetch_hits", "Reads served from staged (prefetched) items", ss2.hits);
	COUNTER("prefetch_late", "Reads that waited for a prefetch on its way, or came before it",
		ss2.late + os.first);
	COUNTER("prefetch_wasted_bytes", "Staged bytes freed unread", ss2.wasted_bytes);
	COUNTER("prefetch_resident", "Files not fetched: the kernel caches them above the mount", fs.resident);
	GAUGE("prefetch_staged_bytes", "Bytes staged now (prefetched, not read yet)", ss2.bytes);
	GAUGE("prefetch_staged_peak_bytes", "The most bytes staged at once", ss2.peak);
	GAUGE("prefetch_staging_limit_bytes", "Staging's room (--prefetch-mem, less under memory pressure)",
	      ss2.limit);
	COUNTER("job_wait_us", "Microseconds jobs' DataLoaders waited for data (reported by epochfs-run)",
		os.job_wait_us);
	COUNTER("job_run_us", "Microseconds of the jobs' run those reports cover", os.job_run_us);
	GAUGE("manifest_files", "Files the manifest (--manifest) checks", c->man_files);
	GAUGE("manifest_unverified", "Files the manifest cannot check (not in it, or another size): storage only",
	      c->man_unverified);
	struct group_stats ps = { 0 };
	uint64_t groups = 0;
	if (c->prep)
		prepdir_stats(c->prep, &ps, &groups);
	GAUGE("prep_groups", "Prep groups declared in .prep/", groups);
	if (c->prep && n < max)
		out[n++] = (struct sample){ .name = "prep_batch_files", .kind = SAMPLE_INFO,
					    .help = "Where made batches live and how consumers get them: tmpfs or "
						    "memfd (the kernel reads them by passthrough), or memory (copied)",
					    .text = prepdir_batch_files(c->prep) };
	COUNTER("prep_batches_produced", "Batches made (first time)", ps.produced);
	COUNTER("prep_batches_regenerated", "Batches made again after they were freed", ps.regenerated);
	COUNTER("prep_batches_freed", "Batches freed once their consumers read them", ps.freed);
	COUNTER("prep_served_bytes", "Batch bytes read by consumers through the daemon", ps.served_bytes);
	COUNTER("prep_images", "Images decoded and augmented", ps.images);
	COUNTER("prep_bad_samples", "Images replaced by a substitute (corrupt, not JPEG, too large)", ps.bad_samples);
	GAUGE("prep_staged_bytes", "Bytes of made batches held in memory", ps.staged_bytes);
	GAUGE("prep_staged_peak_bytes", "Most bytes of made batches held at once, all groups together", ps.staged_peak);
	GAUGE("prep_mem_limit_bytes", "What made batches may hold, all groups together (--prep-mem)",
	      ps.mem_limit == UINT64_MAX ? 0 : ps.mem_limit);
	GAUGE("prep_consumer_held_bytes", "Bytes of batch files handed out by passthrough that only consumers "
	      "hold now, out of --prep-mem's count (at most --prep-mem again)", ps.consumer_bytes);
	GAUGE("prep_consumer_held_peak_bytes", "The most such bytes at once", ps.consumer_peak);
	COUNTER("prep_passthrough_held_back", "Batch opens read through the daemon because consumers held "
		"--prep-mem of batch files out of its count already", ps.hand_refused);
	GAUGE("prep_consumers", "Batch files open now", ps.readers);
	COUNTER("prep_consumers_dropped", "Consumers given up on after stalling", ps.dropped);
#undef GAUGE
#undef COUNTER
	if (n < max)
		out[n++] = (struct sample){ .name = "prep_cpu_seconds", .help = "CPU seconds spent making batches",
					    .kind = SAMPLE_COUNTER, .is_float = 1, .d = ps.cpu_ns / 1e9 };
	struct rusage ru;
	if (n < max && getrusage(RUSAGE_SELF, &ru) == 0)
		out[n++] = (struct sample){ .name = "cpu_seconds", .kind = SAMPLE_COUNTER, .is_float = 1,
					    .help = "CPU seconds the daemon has used, user and system, all threads",
					    .d = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
						 (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6 };
	n += stats_samples(&c->stats, out + n, max - n);
	if (c->peer.samples)
		n += c->peer.samples(c->peer.ctx, out + n, max - n);
	if (n < max)
		out[n++] = (struct sample){ .name = "uptime_s", .help = "Seconds since mount",
					    .kind = SAMPLE_GAUGE, .is_float = 1,
					    .d = stats_uptime(&c->stats) };
	if (n < max)
		out[n++] = (struct sample){ .name = "persist_adopt_seconds",
					    .help = "Seconds the adoption of the previous daemon's cache took",
					    .kind = SAMPLE_GAUGE, .is_float = 1, .d = pst.adopt_seconds };
	if (n < max)
		out[n++] = (struct sample){ .name = "scan_seconds", .help = "Seconds the mount-time scan took",
					    .kind = SAMPLE_GAUGE, .is_float = 1, .d = t.scan_seconds };
	return n;
}
