/*
 * Fuzz target: the launcher's environment (ferry_dist_env_read), the values of
 * whatever torchrun, Open MPI or Slurm set, SLURM_TASKS_PER_NODE's list among
 * them. The input is the values of the variables below, in order, separated by
 * newlines; an empty value leaves the variable unset. What is accepted must be
 * consistent: 0 <= rank < world size, and a local rank and local world size
 * both known or both -1, the local rank below the local world size.
 */
#include <ferry/ferry.h>

#include <stdlib.h>
#include <string.h>

static const char *vars[] = {"RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "LOCAL_WORLD_SIZE",
                             "OMPI_COMM_WORLD_RANK",
                             "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK",
                             "OMPI_COMM_WORLD_LOCAL_SIZE",
                             "SLURM_PROCID",
                             "SLURM_NTASKS",
                             "SLURM_LOCALID",
                             "SLURM_NTASKS_PER_NODE",
                             "SLURM_TASKS_PER_NODE",
                             "SLURM_NODEID"};
#define NVARS (sizeof vars / sizeof vars[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        abort();
    memcpy(text, data, size);
    text[size] = 0;
    char *p = text;
    for (size_t i = 0; i < NVARS; i++) {
        char *end = p ? strchr(p, '\n') : NULL;
        if (end)
            *end = 0;
        if (p && *p)
            setenv(vars[i], p, 1);
        else
            unsetenv(vars[i]);
        p = end ? end + 1 : NULL;
    }
    ferry_dist_env e;
    if (ferry_dist_env_read(&e) == 0) {
        if (e.rank < 0 || e.rank >= e.world_size || !e.launcher)
            abort();
        if ((e.local_rank < 0) != (e.local_world_size < 0))
            abort();
        if (e.local_rank >= 0 && (e.local_rank >= e.local_world_size ||
                                  e.local_world_size > e.world_size || e.local_rank > e.rank))
            abort();
    }
    int64_t r, w;
    if (ferry_dist_from_env(&r, &w) == 0 && (r < 0 || r >= w))
        abort();
    free(text);
    return 0;
}
