/*
 * ferry/caffe2.h - Caffe2's formats: TensorProtos values and minidb files.
 *
 * Caffe2 reads training data from a DB (minidb, LMDB, LevelDB, RocksDB) whose
 * values are most often a serialised caffe2.TensorProtos: protos[0] the image
 * (an encoded file as STRING, or raw HxWxC bytes as BYTE), protos[1] the label
 * (INT32, one value or several; or FLOAT), further protos anything else. The
 * messages, as caffe2/proto/caffe2.proto defines them:
 *
 *     message TensorProtos { repeated TensorProto protos = 1; }
 *     message TensorProto {
 *       repeated int64 dims = 1;       optional DataType data_type = 2 [default = FLOAT];
 *       repeated float float_data = 3 [packed];  repeated int32 int32_data = 4 [packed];
 *       optional bytes byte_data = 5;  repeated bytes string_data = 6;
 *       optional string name = 7;      repeated double double_data = 9 [packed];
 *       repeated int64 int64_data = 10 [packed];  (device_detail = 8, segment = 11)
 *     }
 *
 * minidb is Caffe2's own DB: one file of entries appended one after the other,
 * each (int32 key length, int32 value length, key, value), the lengths
 * little-endian as Caffe2 writes them on the machines it runs on, no header, no
 * index, no checksum. ferry reads it through ferry_db ("minidb" backend) and as
 * the source "minidb:FILE" (docs/cli.md), and writes it through a ferry_db
 * transaction: a temporary file beside the target, fsync, rename.
 *
 * Both come from anywhere, so everything is checked: any malformed input is
 * FERRY_ECORRUPT with a message that says where, never a read outside the buffer.
 */
#ifndef FERRY_CAFFE2_H
#define FERRY_CAFFE2_H

#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TensorProto.DataType */
enum {
    FERRY_C2_UNDEFINED = 0,
    FERRY_C2_FLOAT = 1,
    FERRY_C2_INT32 = 2,
    FERRY_C2_BYTE = 3,
    FERRY_C2_STRING = 4,
    FERRY_C2_BOOL = 5,
    FERRY_C2_UINT8 = 6,
    FERRY_C2_INT8 = 7,
    FERRY_C2_UINT16 = 8,
    FERRY_C2_INT16 = 9,
    FERRY_C2_INT64 = 10,
    FERRY_C2_FLOAT16 = 12,
    FERRY_C2_DOUBLE = 13
};

/* One decoded TensorProto. Pointers lead into the buffer given to
 * ferry_tensorprotos_decode (nothing is copied or allocated): valid as long as
 * that buffer. */
typedef struct ferry_tensor_proto {
    int32_t data_type; /* FERRY_C2_*; FLOAT when absent, protobuf's default */
    int ndim;          /* dims given, 0 .. FERRY_MAX_DIMS */
    int64_t dims[FERRY_MAX_DIMS];
    const char *name; /* name (not NUL-terminated), name_len bytes; NULL when absent */
    size_t name_len;
    /* Values in the field data_type names (float_data for FLOAT, int32_data for
     * INT32, BOOL, UINT8, INT8, UINT16, INT16 and FLOAT16, byte_data's bytes for
     * BYTE, string_data's strings for STRING, double_data, int64_data); values in
     * the other fields are ignored, as Caffe2 does. */
    uint64_t count;
    /* BYTE: byte_data. STRING: the first string. Others: NULL. */
    const uint8_t *bytes;
    size_t nbytes;
    /* private: the message, for ferry_tensor_proto_values and _string */
    const uint8_t *msg_;
    size_t msg_size_;
} ferry_tensor_proto;

/* Decodes a serialised TensorProtos of n bytes at buf: the first `cap` protos
 * into out[0 .. cap), and *count set to how many the message holds (all of them
 * are checked, also past cap). Follows protobuf's wire format (fields in any
 * order, the last of an optional field wins, repeated numbers packed or not,
 * unknown fields skipped) and checks what Caffe2's deserialiser relies on:
 * negative dims, more than FERRY_MAX_DIMS dims, a product of dims that is not the
 * number of values (when dims are given), int32_data values outside int32,
 * packed runs that are not whole values, lengths past the end. Errors are
 * FERRY_ECORRUPT: "tensorprotos: proto 1: byte 37: field 4 length 90 runs past
 * the end (52 bytes)". Thread-safe. */
FERRY_API int ferry_tensorprotos_decode(const void *buf, size_t n, ferry_tensor_proto *out,
                                        size_t cap, size_t *count);

/* The ferry dtype of a TensorProto's values: FLOAT f32, DOUBLE f64, INT32 i32,
 * INT64 i64, BOOL bool, UINT8 and BYTE u8, INT8 i8, UINT16 u16, INT16 i16,
 * FLOAT16 f16 (its bits, as Caffe2 stores them in int32_data); STRING and
 * UNDEFINED have none (FERRY_DTYPE_INVALID). */
FERRY_API ferry_dtype ferry_tensor_proto_dtype(const ferry_tensor_proto *t);

/* Copies up to n values of a numeric TensorProto to dst as dtype `dt` (the
 * tensor's own dtype, or I64 for any integer type, or F32/F64 for any number):
 * native byte order, no alignment needed. Returns how many it copied,
 * min(n, count); 0 for a STRING tensor or a dtype it does not convert to. The
 * buffer the tensor was decoded from must still be valid. */
FERRY_API uint64_t ferry_tensor_proto_values(const ferry_tensor_proto *t, ferry_dtype dt, void *dst,
                                             uint64_t n);

/* String k (0-based) of a STRING TensorProto, in the decoded buffer. FERRY_ERANGE
 * past the last. */
FERRY_API int ferry_tensor_proto_string(const ferry_tensor_proto *t, uint64_t k, const uint8_t **s,
                                        size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_CAFFE2_H */
