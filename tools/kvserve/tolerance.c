// SPDX-License-Identifier: GPL-2.0
/* kvserve: the kernels' results against the C reference's (tolerance.h). */
#include <math.h>
#include <string.h>

#include <kvshare/kv_layout.h>

#include "tolerance.h"

double tol_bound(uint32_t dtype)
{
	return dtype == KVS_DTYPE_F16 ? 2e-3 : 1e-2;
}

static float raw_f32(uint32_t dtype, const void *p, uint32_t i)
{
	uint16_t h;
	float f;

	if (dtype == KVS_DTYPE_F32) {
		memcpy(&f, (const char *)p + 4 * (size_t)i, 4);
		return f;
	}
	memcpy(&h, (const char *)p + 2 * (size_t)i, 2);
	return dtype == KVS_DTYPE_BF16 ? kv_bf16_to_f32(h) : kv_f16_to_f32(h);
}

static void add_one(struct tol_err *e, double got, double ref)
{
	double d = fabs(got - ref);

	if (!isfinite(got) || !isfinite(ref)) {
		e->not_finite = true;
		return;
	}
	e->d2 += d * d;
	e->r2 += ref * ref;
	if (d > e->max_abs)
		e->max_abs = d;
}

void tol_add_raw(struct tol_err *e, uint32_t dtype, const void *got, const void *ref,
		 uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		add_one(e, raw_f32(dtype, got, i), raw_f32(dtype, ref, i));
}

void tol_add_f32(struct tol_err *e, const float *got, const float *ref, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		add_one(e, got[i], ref[i]);
}

double tol_rel(const struct tol_err *e)
{
	if (e->not_finite)
		return INFINITY;
	if (e->r2 == 0)
		return e->d2 == 0 ? 0 : INFINITY;
	return sqrt(e->d2 / e->r2);
}

/*
 * Logits are the final state (norm sqrt(hidden)) times columns of norm
 * about 1: a relative error r in the state moves a logit by about r times
 * its size.  Twice that covers both tokens' logits moving.
 */
bool tol_flip_ok(const float *logits, uint32_t ref_tok, uint32_t served, double bound)
{
	double gap = (double)logits[ref_tok] - logits[served];
	double scale = fmax(1.0, fabs(logits[ref_tok]));

	return gap >= 0 && gap <= 2 * bound * scale;
}
