/* Structs that grow (ringkv.h): the struct_size check, and the copy in this
 * library's layout that the calls work on (a prefix copy while each struct
 * has one version; rkv_snapshot_info's later ones will need more). */
#include <string.h>

#include "internal.h"

rkv_status rkv__attention_args_load(const char *what, const rkv_attention_args *in,
                                    rkv_attention_args *out) {
    rkv_status st = rkv__struct_size_check(what, "args", "rkv_attention_args",
                                           "RKV_ATTENTION_ARGS_INIT", in->struct_size,
                                           RKV__ATTENTION_ARGS_V1, sizeof *out);
    if (st != RKV_OK) return st;
    memset(out, 0, sizeof *out);
    memcpy(out, in, in->struct_size);
    out->struct_size = sizeof *out;
    return RKV_OK;
}

rkv_status rkv__model_config_load(const char *what, const rkv_model_config *in,
                                  rkv_model_config *out) {
    rkv_status st = rkv__struct_size_check(what, "cfg", "rkv_model_config",
                                           "RKV_MODEL_CONFIG_INIT or rkv_model_preset",
                                           in->struct_size, RKV__MODEL_CONFIG_V1, sizeof *out);
    if (st != RKV_OK) return st;
    memset(out, 0, sizeof *out);
    memcpy(out, in, in->struct_size);
    out->struct_size = sizeof *out;
    return RKV_OK;
}

rkv_status rkv__snapshot_info_check(const char *what, const rkv_snapshot_info *info) {
    return rkv__struct_size_check(what, "info", "rkv_snapshot_info", "RKV_SNAPSHOT_INFO_INIT",
                                  info->struct_size, RKV__SNAPSHOT_INFO_V1, sizeof *info);
}

void rkv__snapshot_info_store(rkv_snapshot_info *dst, const rkv_snapshot_info *src) {
    const size_t n = dst->struct_size;
    memcpy(dst, src, n);
    dst->struct_size = n;
}
