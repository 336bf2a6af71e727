#include "dataset_internal.h"
int ferry__mds_open_spec(ferry_dataset **out, ferry__spec *s)
{
    (void)out;
    return ferry__err(FERRY_ENOTSUP, "source %s: not yet", s->kind);
}
