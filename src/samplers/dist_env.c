/*
 * The launcher's environment: where this process is among those torchrun, Open
 * MPI or Slurm started (ferry/sampler.h, ferry_dist_env_read). The variables of
 * one launcher are read together and checked against each other.
 */
#include "ferry/sampler.h"
#include "../core/internal.h"

#include <stdlib.h>
#include <string.h>

#define MAX_WORLD ((int64_t)1 << 31)

typedef struct family {
    const char *launcher;
    const char *rank, *world, *local_rank, *local_world;
} family;

static const family families[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

static int number(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!ferry__parse_i64(v, lo, hi, out))
        return ferry__err(FERRY_EINVAL,
                          "environment: %s=\"%s\" is not a decimal number in [%lld, %lld]", name, v,
                          (long long)lo, (long long)hi);
    return 0;
}

/* This node's count in Slurm's SLURM_TASKS_PER_NODE ("4(x2),3": two nodes of 4,
 * then one of 3), node = SLURM_NODEID. 0 and *count = -1 when it cannot say. */
static int slurm_tasks_per_node(int64_t *count)
{
    const char *list = getenv("SLURM_TASKS_PER_NODE"), *id = getenv("SLURM_NODEID");
    *count = -1;
    if (!list || !id)
        return 0;
    int64_t node;
    int rc = number("SLURM_NODEID", id, 0, MAX_WORLD, &node);
    if (rc < 0)
        return rc;
    const char *p = list;
    while (*p) {
        char *end;
        long long n = strtoll(p, &end, 10), times = 1;
        if (end == p || n < 1 || n > MAX_WORLD)
            goto bad;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x')
                goto bad;
            times = strtoll(p + 2, &end, 10);
            if (end == p + 2 || times < 1 || *end != ')')
                goto bad;
            p = end + 1;
        }
        if (node < times) {
            *count = n;
            return 0;
        }
        node -= times;
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    return ferry__err(
        FERRY_EINVAL,
        "environment: SLURM_NODEID=\"%s\" is past the nodes SLURM_TASKS_PER_NODE=\"%s\" "
        "lists",
        id, list);
bad:
    return ferry__err(FERRY_EINVAL,
                      "environment: SLURM_TASKS_PER_NODE=\"%s\" is not a list such as \"4(x2),3\"",
                      list);
}

/* Both of a pair, or neither. */
static int pair(const char *a, const char *va, const char *b, const char *vb)
{
    if (!va == !vb)
        return 0;
    return ferry__err(FERRY_EINVAL, "environment: %s is set (\"%s\") but %s is not", va ? a : b,
                      va ? va : vb, va ? b : a);
}

static int read_family(const family *f, ferry_dist_env *e)
{
    int rc = 0;
    const char *r = getenv(f->rank), *w = getenv(f->world), *lr = getenv(f->local_rank),
               *lw = getenv(f->local_world);
    FERRY_TRY(pair(f->rank, r, f->world, w));
    FERRY_TRY(number(f->world, w, 1, MAX_WORLD, &e->world_size));
    FERRY_TRY(number(f->rank, r, 0, MAX_WORLD, &e->rank));
    if (e->rank >= e->world_size)
        FERRY_FAIL(FERRY_EINVAL, "environment: %s=%lld is not below %s=%lld", f->rank,
                   (long long)e->rank, f->world, (long long)e->world_size);
    const char *lw_name = f->local_world;
    if (!lw && !strcmp(f->launcher, "Slurm")) {
        FERRY_TRY(slurm_tasks_per_node(&e->local_world_size));
        lw_name = "SLURM_TASKS_PER_NODE";
        if (e->local_world_size < 0 && lr)
            FERRY_FAIL(FERRY_EINVAL,
                       "environment: SLURM_LOCALID is set (\"%s\") but neither "
                       "SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE with SLURM_NODEID is",
                       lr);
        if (e->local_world_size < 0)
            return 0;
    } else {
        /* Slurm sets SLURM_NTASKS_PER_NODE in a batch script too, where no task has a
         * SLURM_LOCALID yet */
        if (strcmp(f->launcher, "Slurm") != 0)
            FERRY_TRY(pair(f->local_rank, lr, f->local_world, lw));
        if (!lw)
            return 0;
        FERRY_TRY(number(f->local_world, lw, 1, MAX_WORLD, &e->local_world_size));
    }
    if (!lr) {
        /* Slurm without SLURM_LOCALID: the node's count alone */
        e->local_world_size = -1;
        return 0;
    }
    FERRY_TRY(number(f->local_rank, lr, 0, MAX_WORLD, &e->local_rank));
    if (e->local_rank >= e->local_world_size)
        FERRY_FAIL(FERRY_EINVAL, "environment: %s=%lld is not below %s=%lld", f->local_rank,
                   (long long)e->local_rank, lw_name, (long long)e->local_world_size);
    if (e->local_world_size > e->world_size)
        FERRY_FAIL(FERRY_EINVAL, "environment: %s=%lld is more than %s=%lld", lw_name,
                   (long long)e->local_world_size, f->world, (long long)e->world_size);
    if (e->local_rank > e->rank)
        FERRY_FAIL(FERRY_EINVAL,
                   "environment: %s=%lld is more than %s=%lld (a process's place on its node "
                   "cannot be past its place among all)",
                   f->local_rank, (long long)e->local_rank, f->rank, (long long)e->rank);
cleanup:
    return rc;
}

int ferry_dist_env_read(ferry_dist_env *out)
{
    *out = (ferry_dist_env){0, 1, -1, -1, ""};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        const family *f = &families[i];
        if (!getenv(f->rank) && !getenv(f->world)) {
            /* a local rank alone is a launcher that set half of its variables */
            if (getenv(f->local_rank) && strcmp(f->launcher, "Slurm") != 0)
                return ferry__err(FERRY_EINVAL, "environment: %s is set (\"%s\") but %s is not",
                                  f->local_rank, getenv(f->local_rank), f->rank);
            continue;
        }
        ferry_dist_env e = {0, 1, -1, -1, f->launcher};
        int rc = read_family(f, &e);
        if (rc < 0)
            return rc;
        *out = e;
        return 0;
    }
    return 0;
}

int ferry_dist_from_env(int64_t *rank, int64_t *world_size)
{
    ferry_dist_env e;
    int rc = ferry_dist_env_read(&e);
    *rank = rc < 0 ? 0 : e.rank;
    *world_size = rc < 0 ? 1 : e.world_size;
    return rc;
}
