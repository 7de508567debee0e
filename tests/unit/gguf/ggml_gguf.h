#pragma once
// llama.cpp's own GGUF reader and writer (libggml-base.so, dlopened), used as the independent
// oracle for our reader and writer. Signatures from ggml's include/gguf.h and ggml.h.
#include <cstddef>
#include <cstdint>

#include "common/ggml_lib.h"

namespace ds4::test {

struct gguf_context;
struct ggml_context;
struct ggml_tensor;
struct gguf_init_params {
  bool no_alloc;
  ggml_context** ctx;
};
struct ggml_init_params {
  size_t mem_size;
  void* mem_buffer;
  bool no_alloc;
};

struct GgmlGguf {
  gguf_context* (*init_from_file)(const char*, gguf_init_params) = ggml_fn<decltype(init_from_file)>("gguf_init_from_file");
  gguf_context* (*init_empty)() = ggml_fn<decltype(init_empty)>("gguf_init_empty");
  void (*free)(gguf_context*) = ggml_fn<decltype(free)>("gguf_free");
  uint32_t (*get_version)(const gguf_context*) = ggml_fn<decltype(get_version)>("gguf_get_version");
  size_t (*get_alignment)(const gguf_context*) = ggml_fn<decltype(get_alignment)>("gguf_get_alignment");
  size_t (*get_data_offset)(const gguf_context*) = ggml_fn<decltype(get_data_offset)>("gguf_get_data_offset");
  int64_t (*get_n_kv)(const gguf_context*) = ggml_fn<decltype(get_n_kv)>("gguf_get_n_kv");
  const char* (*get_key)(const gguf_context*, int64_t) = ggml_fn<decltype(get_key)>("gguf_get_key");
  int (*get_kv_type)(const gguf_context*, int64_t) = ggml_fn<decltype(get_kv_type)>("gguf_get_kv_type");
  int (*get_arr_type)(const gguf_context*, int64_t) = ggml_fn<decltype(get_arr_type)>("gguf_get_arr_type");
  size_t (*get_arr_n)(const gguf_context*, int64_t) = ggml_fn<decltype(get_arr_n)>("gguf_get_arr_n");
  const void* (*get_arr_data)(const gguf_context*, int64_t) = ggml_fn<decltype(get_arr_data)>("gguf_get_arr_data");
  const char* (*get_arr_str)(const gguf_context*, int64_t, size_t) = ggml_fn<decltype(get_arr_str)>("gguf_get_arr_str");
  uint8_t (*get_val_u8)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_u8)>("gguf_get_val_u8");
  int8_t (*get_val_i8)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_i8)>("gguf_get_val_i8");
  uint16_t (*get_val_u16)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_u16)>("gguf_get_val_u16");
  int16_t (*get_val_i16)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_i16)>("gguf_get_val_i16");
  uint32_t (*get_val_u32)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_u32)>("gguf_get_val_u32");
  int32_t (*get_val_i32)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_i32)>("gguf_get_val_i32");
  float (*get_val_f32)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_f32)>("gguf_get_val_f32");
  uint64_t (*get_val_u64)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_u64)>("gguf_get_val_u64");
  int64_t (*get_val_i64)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_i64)>("gguf_get_val_i64");
  double (*get_val_f64)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_f64)>("gguf_get_val_f64");
  bool (*get_val_bool)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_bool)>("gguf_get_val_bool");
  const void* (*get_val_data)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_data)>("gguf_get_val_data");
  const char* (*get_val_str)(const gguf_context*, int64_t) = ggml_fn<decltype(get_val_str)>("gguf_get_val_str");
  int64_t (*get_n_tensors)(const gguf_context*) = ggml_fn<decltype(get_n_tensors)>("gguf_get_n_tensors");
  const char* (*get_tensor_name)(const gguf_context*, int64_t) = ggml_fn<decltype(get_tensor_name)>("gguf_get_tensor_name");
  int (*get_tensor_type)(const gguf_context*, int64_t) = ggml_fn<decltype(get_tensor_type)>("gguf_get_tensor_type");
  size_t (*get_tensor_offset)(const gguf_context*, int64_t) = ggml_fn<decltype(get_tensor_offset)>("gguf_get_tensor_offset");
  size_t (*get_tensor_size)(const gguf_context*, int64_t) = ggml_fn<decltype(get_tensor_size)>("gguf_get_tensor_size");
  const int64_t* (*get_tensor_ne)(const gguf_context*, int64_t) = ggml_fn<decltype(get_tensor_ne)>("gguf_get_tensor_ne");

  // Writer side.
  void (*set_val_u8)(gguf_context*, const char*, uint8_t) = ggml_fn<decltype(set_val_u8)>("gguf_set_val_u8");
  void (*set_val_i8)(gguf_context*, const char*, int8_t) = ggml_fn<decltype(set_val_i8)>("gguf_set_val_i8");
  void (*set_val_u16)(gguf_context*, const char*, uint16_t) = ggml_fn<decltype(set_val_u16)>("gguf_set_val_u16");
  void (*set_val_i16)(gguf_context*, const char*, int16_t) = ggml_fn<decltype(set_val_i16)>("gguf_set_val_i16");
  void (*set_val_u32)(gguf_context*, const char*, uint32_t) = ggml_fn<decltype(set_val_u32)>("gguf_set_val_u32");
  void (*set_val_i32)(gguf_context*, const char*, int32_t) = ggml_fn<decltype(set_val_i32)>("gguf_set_val_i32");
  void (*set_val_f32)(gguf_context*, const char*, float) = ggml_fn<decltype(set_val_f32)>("gguf_set_val_f32");
  void (*set_val_u64)(gguf_context*, const char*, uint64_t) = ggml_fn<decltype(set_val_u64)>("gguf_set_val_u64");
  void (*set_val_i64)(gguf_context*, const char*, int64_t) = ggml_fn<decltype(set_val_i64)>("gguf_set_val_i64");
  void (*set_val_f64)(gguf_context*, const char*, double) = ggml_fn<decltype(set_val_f64)>("gguf_set_val_f64");
  void (*set_val_bool)(gguf_context*, const char*, bool) = ggml_fn<decltype(set_val_bool)>("gguf_set_val_bool");
  void (*set_val_str)(gguf_context*, const char*, const char*) = ggml_fn<decltype(set_val_str)>("gguf_set_val_str");
  void (*set_arr_data)(gguf_context*, const char*, int, const void*, size_t) = ggml_fn<decltype(set_arr_data)>("gguf_set_arr_data");
  void (*set_arr_str)(gguf_context*, const char*, const char**, size_t) = ggml_fn<decltype(set_arr_str)>("gguf_set_arr_str");
  void (*add_tensor)(gguf_context*, const ggml_tensor*) = ggml_fn<decltype(add_tensor)>("gguf_add_tensor");
  void (*set_tensor_data)(gguf_context*, const char*, const void*) = ggml_fn<decltype(set_tensor_data)>("gguf_set_tensor_data");
  bool (*write_to_file)(const gguf_context*, const char*, bool) = ggml_fn<decltype(write_to_file)>("gguf_write_to_file");

  ggml_context* (*ggml_init)(ggml_init_params) = ggml_fn<decltype(ggml_init)>("ggml_init");
  void (*ggml_free)(ggml_context*) = ggml_fn<decltype(ggml_free)>("ggml_free");
  ggml_tensor* (*ggml_new_tensor)(ggml_context*, int, int, const int64_t*) = ggml_fn<decltype(ggml_new_tensor)>("ggml_new_tensor");
  ggml_tensor* (*ggml_set_name)(ggml_tensor*, const char*) = ggml_fn<decltype(ggml_set_name)>("ggml_set_name");
};

}  // namespace ds4::test
