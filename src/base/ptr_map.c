/* ptr_map.c: open-addressing hash map from address keys to pointers (see ptr_map.h). */
#include "base/ptr_map.h"

#include <string.h>

#define PTR_MAP_MIN_CAP 16

static size_t slot_of(uintptr_t key, size_t cap) {
  /* Fibonacci hashing: the top log2(cap) bits of the product, since the low bits
   * of block addresses (and so of the product) are zeros. */
  uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> (64 - __builtin_ctzll((unsigned long long)cap)));
}

void tpu_ptr_map_init(tpu_ptr_map_t *m, tpu_allocator_t host) {
  memset(m, 0, sizeof(*m));
  m->host = host;
}

void tpu_ptr_map_release(tpu_ptr_map_t *m) {
  tpu_allocator_free(m->host, m->slots);
  m->slots = NULL;
  m->cap = m->count = 0;
}

static void insert_slot(tpu_ptr_map_entry_t *slots, size_t cap, uintptr_t key, void *value) {
  size_t i = slot_of(key, cap);
  while (slots[i].key != 0 && slots[i].key != key) i = (i + 1) & (cap - 1);
  slots[i].key = key;
  slots[i].value = value;
}

tpu_status_t tpu_ptr_map_reserve(tpu_ptr_map_t *m, size_t count) {
  size_t need; /* the table stays at most half full */
  if (!tpu_size_mul(count, 2, &need)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "ptr_map: %zu entries is too many", count);
  }
  if (need <= m->cap) return TPU_OK;
  size_t cap = m->cap ? m->cap : PTR_MAP_MIN_CAP;
  while (cap < need) {
    if (!tpu_size_mul(cap, 2, &cap)) {
      return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "ptr_map: %zu entries is too many", count);
    }
  }
  void *mem;
  TPU_RETURN_IF_ERROR(
      tpu_allocator_calloc(m->host, cap, sizeof(tpu_ptr_map_entry_t), "ptr_map", &mem));
  tpu_ptr_map_entry_t *slots = mem;
  for (size_t i = 0; i < m->cap; i++) {
    if (m->slots[i].key) insert_slot(slots, cap, m->slots[i].key, m->slots[i].value);
  }
  tpu_allocator_free(m->host, m->slots);
  m->slots = slots;
  m->cap = cap;
  return TPU_OK;
}

tpu_status_t tpu_ptr_map_put(tpu_ptr_map_t *m, uintptr_t key, void *value) {
  if (key == 0) return tpu_status_set(TPU_ERR_INTERNAL, "ptr_map: key 0 is reserved");
  size_t need;
  if (!tpu_size_add(m->count, 1, &need)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "ptr_map: too many entries");
  }
  TPU_RETURN_IF_ERROR(tpu_ptr_map_reserve(m, need));
  size_t i = slot_of(key, m->cap);
  while (m->slots[i].key != 0 && m->slots[i].key != key) i = (i + 1) & (m->cap - 1);
  if (m->slots[i].key == 0) m->count++;
  m->slots[i].key = key;
  m->slots[i].value = value;
  return TPU_OK;
}

static size_t find_slot(const tpu_ptr_map_t *m, uintptr_t key) {
  if (m->cap == 0 || key == 0) return SIZE_MAX;
  size_t i = slot_of(key, m->cap);
  while (m->slots[i].key != 0) {
    if (m->slots[i].key == key) return i;
    i = (i + 1) & (m->cap - 1);
  }
  return SIZE_MAX;
}

void *tpu_ptr_map_get(const tpu_ptr_map_t *m, uintptr_t key) {
  size_t i = find_slot(m, key);
  return i == SIZE_MAX ? NULL : m->slots[i].value;
}

void *tpu_ptr_map_remove(tpu_ptr_map_t *m, uintptr_t key) {
  size_t i = find_slot(m, key);
  if (i == SIZE_MAX) return NULL;
  void *value = m->slots[i].value;
  size_t mask = m->cap - 1;
  /* Backward-shift deletion: move later entries of the probe run into the hole
   * when their home slot does not lie cyclically in (hole, j]. */
  size_t hole = i;
  for (size_t j = (i + 1) & mask; m->slots[j].key != 0; j = (j + 1) & mask) {
    size_t home = slot_of(m->slots[j].key, m->cap);
    bool stays = (hole <= j) ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!stays) {
      m->slots[hole] = m->slots[j];
      hole = j;
    }
  }
  m->slots[hole].key = 0;
  m->slots[hole].value = NULL;
  m->count--;
  return value;
}
