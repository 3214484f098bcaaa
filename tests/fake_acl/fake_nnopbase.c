/* Stand-in for the four libnnopbase.so calls ms_kvcache's Ascend PyNative module makes (tests only),
 * from the documented prototypes (CANN 8.x aclnn/acl_meta.h). Counts live handles so tests can check
 * that every handle is destroyed.
 *
 * Build: cc -shared -fPIC -o libnnopbase.so fake_nnopbase.c */
#include <stdlib.h>
#include <string.h>

#include "fake_acl.h"

long fake_tensors_created = 0;
long fake_tensors_destroyed = 0;
long fake_lists_created = 0;
long fake_lists_destroyed = 0;

struct aclTensor* aclCreateTensor(const int64_t* view_dims, uint64_t view_dims_num, int32_t data_type,
                                  const int64_t* stride, int64_t offset, int32_t format, const int64_t* storage_dims,
                                  uint64_t storage_dims_num, void* tensor_data) {
  struct aclTensor* t;
  uint64_t i;
  (void)storage_dims;
  if (view_dims_num > FAKE_MAX_DIMS || storage_dims_num != view_dims_num) return NULL;
  t = (struct aclTensor*)calloc(1, sizeof(*t));
  t->magic = FAKE_TENSOR_MAGIC;
  t->ndim = view_dims_num;
  for (i = 0; i < view_dims_num; ++i) {
    t->dims[i] = view_dims[i];
    t->strides[i] = stride ? stride[i] : 0;
  }
  t->offset = offset;
  t->dtype = data_type;
  t->format = format;
  t->data = tensor_data;
  fake_tensors_created++;
  return t;
}

struct aclTensorList* aclCreateTensorList(const struct aclTensor* const* value, uint64_t size) {
  struct aclTensorList* l = (struct aclTensorList*)calloc(1, sizeof(*l));
  l->magic = FAKE_LIST_MAGIC;
  l->n = size;
  l->items = (const struct aclTensor**)calloc(size ? size : 1, sizeof(*l->items));
  memcpy(l->items, value, size * sizeof(*l->items));
  fake_lists_created++;
  return l;
}

int aclDestroyTensor(const struct aclTensor* t) {
  if (t == NULL || t->magic != FAKE_TENSOR_MAGIC) return 161001;
  ((struct aclTensor*)t)->magic = 0;
  free((void*)t);
  fake_tensors_destroyed++;
  return 0;
}

int aclDestroyTensorList(const struct aclTensorList* l) {
  uint64_t i;
  if (l == NULL || l->magic != FAKE_LIST_MAGIC) return 161001;
  for (i = 0; i < l->n; ++i) aclDestroyTensor(l->items[i]); /* a list owns its tensors, as in CANN */
  free((void*)l->items);
  ((struct aclTensorList*)l)->magic = 0;
  free((void*)l);
  fake_lists_destroyed++;
  return 0;
}
