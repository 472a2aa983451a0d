// SPDX-License-Identifier: GPL-2.0
/*
 * The remote tier's metrics (remote.h: kvsd_remote_metrics), Prometheus
 * text, one sample per tier and pool.
 */
#include <stddef.h>
#include <stdio.h>

#include "remote.h"
#include "tier.h"

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static const char *const write_drop_names[] = {
	[WRITE_DROP_BUSY] = "busy",
	[WRITE_DROP_DOWN] = "down",
	[WRITE_DROP_REFUSED] = "refused",
};

#define EACH_TIER(t) for (t = kvsd_remote_tiers; t; t = t->next)

static void counter(FILE *f, const char *name, const char *help, size_t off)
{
	struct tier *t;

	family(f, name, "counter", help);
	EACH_TIER(t)
		fprintf(f, "%s{pool=\"%s\"} %llu\n", name, t->name,
			get((atomic_ullong *)((char *)&t->st + off)));
}

#define COUNTER(f, name, help, field) \
	counter(f, name, help, offsetof(struct tier_stats, field))

static void latency(FILE *f)
{
	const char *name = "kvshare_remote_fetch_seconds";
	struct tier *t;
	unsigned int b;

	family(f, name, "histogram", "Time of one fetch (a pipeline of GETs).");
	EACH_TIER(t) {
		uint64_t cum = 0;

		for (b = 0; b <= N_LAT; b++) {
			cum += get(&t->st.lat[b]);
			if (b < N_LAT)
				fprintf(f, "%s_bucket{pool=\"%s\",le=\"%g\"} %llu\n", name,
					t->name, lat_ms[b] / 1000.0, (unsigned long long)cum);
			else
				fprintf(f, "%s_bucket{pool=\"%s\",le=\"+Inf\"} %llu\n",
					name, t->name, (unsigned long long)cum);
		}
		fprintf(f, "%s_sum{pool=\"%s\"} %.6f\n%s_count{pool=\"%s\"} %llu\n", name,
			t->name, get(&t->st.lat_sum_us) / 1e6, name, t->name,
			(unsigned long long)cum);
	}
}

static void skipped(FILE *f, struct tier *t)
{
	static const char *const why[] = { "down", "busy", "claimed", "recent_miss",
					   "user_memory" };
	atomic_ullong *c[] = { &t->st.skip_down, &t->st.skip_busy,
			       &t->st.skip_claimed, &t->st.skip_neg, &t->st.skip_user };
	unsigned int i;

	for (i = 0; i < sizeof(why) / sizeof(why[0]); i++)
		fprintf(f, "kvshare_remote_fetch_skipped_total{pool=\"%s\",why=\"%s\"} %llu\n",
			t->name, why[i], get(c[i]));
}

/* Fetched values refused, by reason, under the family @name. */
static void dropped(FILE *f, const char *name, const char *help)
{
	struct tier *t;
	int b;

	family(f, name, "counter", help);
	EACH_TIER(t)
		for (b = 1; b < KVSD_RPAGE_N_BAD; b++)
			fprintf(f, "%s{pool=\"%s\",reason=\"%s\"} %llu\n", name, t->name,
				kvsd_rpage_bad_names[b], get(&t->st.dropped[b]));
}

char *kvsd_remote_metrics(void)
{
	struct tier *t;
	char *buf = NULL;
	size_t len = 0;
	unsigned int b;
	FILE *f;

	if (!kvsd_remote_tiers)
		return NULL;
	f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	family(f, "kvshare_remote_up", "gauge", "1: the pool's Redis answers.");
	EACH_TIER(t)
		fprintf(f, "kvshare_remote_up{pool=\"%s\"} %d\n", t->name,
			atomic_load(&t->up) ? 1 : 0);
	family(f, "kvshare_remote_write_queue", "gauge",
	       "Pages waiting to be written, a reference on each.");
	EACH_TIER(t)
		fprintf(f, "kvshare_remote_write_queue{pool=\"%s\"} %u\n", t->name,
			t->write_queued);
	family(f, "kvshare_remote_write_pending", "gauge",
	       "Pages queued or being written, not yet written or failed.");
	EACH_TIER(t)
		fprintf(f, "kvshare_remote_write_pending{pool=\"%s\"} %llu\n", t->name,
			atomic_load(&t->st.write_pending));
	COUNTER(f, "kvshare_remote_fetches_total",
		"Fetches (LOOKUP misses sent on).", fetches);
	COUNTER(f, "kvshare_remote_fetch_pages_total", "Pages asked of Redis.",
		fetch_pages);
	COUNTER(f, "kvshare_remote_hit_pages_total",
		"Pages fetched, checked and published.", hit_pages);
	COUNTER(f, "kvshare_remote_miss_pages_total", "Fetches that found no page.",
		miss_pages);
	COUNTER(f, "kvshare_remote_fetch_errors_total",
		"Fetches Redis did not answer.", error_fetches);
	COUNTER(f, "kvshare_remote_fetch_bytes_total",
		"Bytes of valid pages fetched.", bytes_in);
	COUNTER(f, "kvshare_remote_written_pages_total", "Pages written.", written);
	COUNTER(f, "kvshare_remote_write_bytes_total", "Bytes written.", bytes_out);
	COUNTER(f, "kvshare_remote_write_errors_total",
		"Pages Redis refused or did not answer.", write_errors);
	family(f, "kvshare_remote_write_dropped_total", "counter",
	       "Pages not queued for writing, by reason: busy (the queue's bound, "
	       "remote_queue or a quarter of the pool: Redis slower than the "
	       "publishes), down (no Redis answers), refused (no reference: quota).");
	EACH_TIER(t)
		for (b = 0; b < 3; b++)
			fprintf(f, "kvshare_remote_write_dropped_total{pool=\"%s\",reason=\"%s\"} %llu\n",
				t->name, write_drop_names[b], get(&t->st.write_dropped[b]));
	COUNTER(f, "kvshare_remote_redirects_total",
		"MOVED, ASK and retries followed.", redirects);
	COUNTER(f, "kvshare_remote_slot_map_loads_total",
		"CLUSTER SLOTS maps loaded.", map_loads);
	COUNTER(f, "kvshare_remote_replica_reads_total",
		"Reads sent to a replica: their master could not be reached.",
		replica_reads);
	COUNTER(f, "kvshare_remote_auth_refused_total",
		"Probes whose AUTH a Redis refused (a wrong user or password).",
		auth_refused);
	dropped(f, "kvshare_remote_dropped_total",
		"Fetched values refused by the check, by reason: size, format, geometry, "
		"key, checksum, mac (a keyed tier: no valid MAC).");
	/* The name before: the same counters, for one release more. */
	dropped(f, "kvshare_remote_dropped_pages_total",
		"Deprecated name of kvshare_remote_dropped_total (the same counters); "
		"removed in the next release.");
	family(f, "kvshare_remote_fetch_skipped_total", "counter",
	       "LOOKUP misses not sent on, by reason.");
	EACH_TIER(t)
		skipped(f, t);
	latency(f);
	fclose(f);
	return buf;
}
