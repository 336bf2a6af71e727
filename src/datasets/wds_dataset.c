#include "shard_files.h"
int ferry__wds_open_spec(ferry_dataset **ds, ferry_stream **st, ferry__spec *s)
{
    (void)ds; (void)st; (void)s;
    return ferry__err(FERRY_ENOTSUP, "wds: todo");
}
