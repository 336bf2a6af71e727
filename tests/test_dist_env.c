/*
 * The launcher's environment: torchrun's, Open MPI's and Slurm's variables read
 * whole (rank, world size, local rank, local world size) and checked against
 * each other, each error naming the variables.
 */
#include "harness.h"

#include <ferry/ferry.h>

static void clear_env(void)
{
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
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static void set4(const char *a, const char *va, const char *b, const char *vb, const char *c,
                 const char *vc, const char *d, const char *vd)
{
    clear_env();
    if (va)
        setenv(a, va, 1);
    if (vb)
        setenv(b, vb, 1);
    if (vc)
        setenv(c, vc, 1);
    if (vd)
        setenv(d, vd, 1);
}

#define TORCHRUN(r, w, lr, lw)                                                                     \
    set4("RANK", r, "WORLD_SIZE", w, "LOCAL_RANK", lr, "LOCAL_WORLD_SIZE", lw)

static void check_env(int64_t rank, int64_t world, int64_t lrank, int64_t lworld,
                      const char *launcher)
{
    ferry_dist_env e;
    CHECK_OK(ferry_dist_env_read(&e));
    CHECK_EQ(e.rank, rank);
    CHECK_EQ(e.world_size, world);
    CHECK_EQ(e.local_rank, lrank);
    CHECK_EQ(e.local_world_size, lworld);
    CHECK(strcmp(e.launcher, launcher) == 0);
}

static void check_refused(const char *msg)
{
    ferry_dist_env e;
    CHECK_RC(ferry_dist_env_read(&e), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), msg);
    int64_t r, w;
    CHECK_RC(ferry_dist_from_env(&r, &w), FERRY_EINVAL);
}

TEST(none_set)
{
    clear_env();
    check_env(0, 1, -1, -1, "");
}

/* torchrun --nnodes=2 --nproc_per_node=2: the second node's second process */
TEST(torchrun_every_variable)
{
    TORCHRUN("3", "4", "1", "2");
    check_env(3, 4, 1, 2, "torchrun");
    TORCHRUN("3", "4", NULL, NULL);
    check_env(3, 4, -1, -1, "torchrun");
}

TEST(torchrun_inconsistent_or_missing)
{
    TORCHRUN("3", "4", "1", NULL);
    check_refused("LOCAL_RANK is set (\"1\") but LOCAL_WORLD_SIZE is not");
    TORCHRUN("3", "4", NULL, "2");
    check_refused("LOCAL_WORLD_SIZE is set (\"2\") but LOCAL_RANK is not");
    TORCHRUN("3", NULL, "1", "2");
    check_refused("RANK is set (\"3\") but WORLD_SIZE is not");
    TORCHRUN(NULL, NULL, "1", "2");
    check_refused("LOCAL_RANK is set (\"1\") but RANK is not");
    TORCHRUN("4", "4", "0", "2");
    check_refused("RANK=4 is not below WORLD_SIZE=4");
    TORCHRUN("3", "4", "2", "2");
    check_refused("LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
    TORCHRUN("3", "4", "1", "8");
    check_refused("LOCAL_WORLD_SIZE=8 is more than WORLD_SIZE=4");
    TORCHRUN("0", "4", "1", "2");
    check_refused("LOCAL_RANK=1 is more than RANK=0");
    TORCHRUN("3", "4", "x", "2");
    check_refused("LOCAL_RANK=\"x\" is not a decimal number");
    TORCHRUN("3", "4", "1", "0");
    check_refused("LOCAL_WORLD_SIZE=\"0\" is not a decimal number in [1, 2147483648]");
}

TEST(open_mpi)
{
    set4("OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", "8", "OMPI_COMM_WORLD_LOCAL_RANK",
         "1", "OMPI_COMM_WORLD_LOCAL_SIZE", "4");
    check_env(5, 8, 1, 4, "Open MPI");
    set4("OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", "8", "OMPI_COMM_WORLD_LOCAL_RANK",
         "4", "OMPI_COMM_WORLD_LOCAL_SIZE", "4");
    check_refused("OMPI_COMM_WORLD_LOCAL_RANK=4 is not below OMPI_COMM_WORLD_LOCAL_SIZE=4");
    set4("OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", NULL, NULL, NULL, NULL, NULL);
    check_refused("OMPI_COMM_WORLD_RANK is set (\"5\") but OMPI_COMM_WORLD_SIZE is not");
}

TEST(slurm)
{
    set4("SLURM_PROCID", "6", "SLURM_NTASKS", "8", "SLURM_LOCALID", "2", "SLURM_NTASKS_PER_NODE",
         "4");
    check_env(6, 8, 2, 4, "Slurm");
    /* the node's count from SLURM_TASKS_PER_NODE: "4(x2),3" is nodes 0 and 1 of 4, node 2 of 3 */
    set4("SLURM_PROCID", "9", "SLURM_NTASKS", "11", "SLURM_LOCALID", "1", "SLURM_TASKS_PER_NODE",
         "4(x2),3");
    setenv("SLURM_NODEID", "2", 1);
    check_env(9, 11, 1, 3, "Slurm");
    setenv("SLURM_NODEID", "1", 1);
    check_env(9, 11, 1, 4, "Slurm");
    setenv("SLURM_NODEID", "3", 1);
    check_refused("SLURM_NODEID=\"3\" is past the nodes SLURM_TASKS_PER_NODE=\"4(x2),3\" lists");
    setenv("SLURM_NODEID", "0", 1);
    setenv("SLURM_TASKS_PER_NODE", "4(2)", 1);
    check_refused("SLURM_TASKS_PER_NODE=\"4(2)\" is not a list such as \"4(x2),3\"");
    setenv("SLURM_TASKS_PER_NODE", "2", 1);
    setenv("SLURM_LOCALID", "2", 1);
    check_refused("SLURM_LOCALID=2 is not below SLURM_TASKS_PER_NODE=2");
    unsetenv("SLURM_TASKS_PER_NODE");
    check_refused("SLURM_LOCALID is set (\"2\") but neither SLURM_NTASKS_PER_NODE nor "
                  "SLURM_TASKS_PER_NODE with SLURM_NODEID is");
    /* a batch script: no task of its own yet, the locals unknown */
    set4("SLURM_PROCID", "0", "SLURM_NTASKS", "8", NULL, NULL, "SLURM_NTASKS_PER_NODE", "4");
    check_env(0, 8, -1, -1, "Slurm");
}

/* torchrun inside an srun or mpirun job: torchrun's variables describe the
 * processes that load */
TEST(torchrun_wins_over_the_job_around_it)
{
    TORCHRUN("3", "4", "1", "2");
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    check_env(3, 4, 1, 2, "torchrun");
}

/* The loader reads the same variables: a stream loader's refusal names them. */
TEST(loader_names_the_variable)
{
    TORCHRUN("3", "4", "2", "2");
    ferry_dataset *ds;
    ferry_stream *none = NULL, *st;
    CHECK_OK(ferry_source_open("synthetic:10,bytes=8", &ds, &none));
    CHECK_OK(ferry_stream_from_dataset(&st, ds));
    ferry_loader_opts o = test_loader_opts(2, 0);
    ferry_loader *l;
    CHECK_RC(ferry_loader_create_stream(&l, st, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
    /* a map-style loader splits only when asked: world_size set, rank from the environment */
    TORCHRUN("3", "4", "1", "2");
    o.world_size = 4;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b;
    CHECK_OK(ferry_loader_next(l, &b));
    CHECK_U64(ferry_batch_indices(b)[0], 3);
    CHECK_U64(ferry_batch_indices(b)[1], 7);
    ferry_batch_release(b);
    ferry_loader_free(l);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}
