/*
 * ferry/npy.h - NumPy .npy and .npz files as datasets.
 *
 * A .npy file is an array; sample i is its row i (index i along the first axis),
 * copied from the mapped file straight into the batch slot. Several arrays whose
 * first dimensions agree are the fields of one sample ("npy:x=feat.npy;y=lab.npy").
 *
 * What is read:
 *  - format versions 1.0, 2.0 and 3.0;
 *  - every numeric dtype and bool: b1 i1 i2 i4 i8 u1 u2 u4 u8 f2 f4 f8, in
 *    either byte order (big-endian data is converted to the host's order on the
 *    way into the batch); complex c8 / c16 as float32 / float64 with a trailing
 *    dimension of 2 (real, imaginary); byte strings "S<n>" and raw "V<n>" as
 *    uint8[n]; unicode "U<n>" as uint32[n] (UTF-32 code points);
 *  - C order, and Fortran order (fortran_order: True), whose rows are gathered
 *    element by element (slower than C order's one copy a row, but correct);
 *  - structured dtypes ([('a', '<i4'), ('b', '<f4', (2,))]): each named member
 *    is a field of its own, with its sub-array shape after the row's shape;
 *  - a 0-d array (shape ()) is a dataset of one sample.
 *  - .npz archives: members stored uncompressed are mapped like .npy files;
 *    deflated ones (np.savez_compressed) are inflated once, at open, into
 *    memory, within a bound (inflate_max; past it they are refused, naming the
 *    member and its size).
 * Refused, with a message naming the file: object dtypes ("|O": Python pickles,
 * code in data), nested structured dtypes, datetimes, long doubles; a header
 * whose shape and dtype disagree with the file's size; a zip member whose sizes
 * lie; a deflated member whose CRC-32 is wrong (a stored member's is not
 * checked: that would read the whole archive at open).
 *
 * Thread rules: a dataset may be read from any number of threads at once.
 */
#ifndef FERRY_NPY_H
#define FERRY_NPY_H

#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_dataset ferry_dataset; /* made below, used through ferry/dataset.h */

#define FERRY_NPY_MAX_HEADER ((size_t)1 << 20) /* header_len above this is refused */

/* One field of a (possibly structured) dtype: a member of a structured dtype, or
 * the whole element of a plain one. */
typedef struct ferry_npy_member {
    char name[FERRY_MAX_NAME]; /* "" for a plain dtype */
    ferry_dtype dtype;         /* as it reaches the batch */
    size_t offset;             /* bytes from the start of an element */
    size_t nbytes;             /* bytes of this member in one element */
    unsigned swap;             /* 0, or the unit (2, 4, 8) whose bytes are reversed */
    int ndim;                  /* the member's own shape (sub-array, complex pair, chars) */
    int64_t shape[FERRY_MAX_DIMS];
} ferry_npy_member;

/* A parsed .npy header. */
typedef struct ferry_npy_header {
    int major, minor;
    uint64_t data_offset; /* where the array's bytes start */
    uint64_t data_bytes;  /* product of the shape times itemsize */
    size_t itemsize;      /* bytes of one element */
    int fortran;
    int ndim;
    int64_t shape[FERRY_MAX_DIMS];
    int structured; /* members come from a structured dtype */
    int nmembers;
    ferry_npy_member members[FERRY_MAX_FIELDS];
} ferry_npy_header;

/* Parses the header at the start of buf (n bytes available: at least the whole
 * header; the array data need not be there). name names the file in messages:
 * "NAME: offset N: why". FERRY_ECORRUPT for malformed headers, FERRY_ENOTSUP for
 * dtypes ferry refuses (object, datetime, nested), FERRY_EOVERFLOW for sizes past
 * the limits. Does not check the data's size: the caller compares data_offset +
 * data_bytes with what it has. */
FERRY_API int ferry_npy_parse_header(const void *buf, size_t n, const char *name,
                                     ferry_npy_header *h);

typedef struct ferry_npy_opts {
    /* Arrays whose first dimensions agree, one per field (or, for a structured
     * dtype, one field per member). Each path is a .npy file, or "ARCHIVE.npz/MEMBER"
     * (".npy" may be left off MEMBER). An .npz path with no member takes every
     * member of the archive, each a field named by the member. */
    const char *const *paths;
    /* Field names, one per path (NULL: "data" for one plain array; for several,
     * the file's name without its directory and extension). Members of a
     * structured dtype are named NAME.MEMBER, or MEMBER alone when there is one
     * path and no name was given. */
    const char *const *names;
    int npaths;
    uint64_t inflate_max; /* bytes of deflated .npz members held in memory in all;
                             0 = 1 GiB */
} ferry_npy_opts;

/* Map-style over the first axis. The files are mapped (and deflated members
 * inflated) at open; errors name the file (and member) and say why. */
FERRY_API int ferry_dataset_npy(ferry_dataset **out, const ferry_npy_opts *o);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_NPY_H */
