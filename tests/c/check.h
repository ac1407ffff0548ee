/* check.h: the minimal test harness shared by the C tests.
 *
 * Each tests/c/test_<layer>.c defines test functions with TEST(name), lists them
 * in main() with RUN(name) and ends with `return check_report();`, which prints
 * "N passed, N failed" and returns non-zero if any check failed.
 */
#ifndef TPU_TESTS_CHECK_H
#define TPU_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_passed_tests, check_failed_tests, check_current_failed;

#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      check_current_failed = 1;                                               \
    }                                                                         \
  } while (0)

#define CHECK_OK(expr)                                                        \
  do {                                                                        \
    tpu_status_t check_st_ = (expr);                                          \
    if (check_st_ != TPU_OK) {                                                \
      fprintf(stderr, "  %s:%d: %s returned %s: %s\n", __FILE__, __LINE__,    \
              #expr, tpu_status_name(check_st_), tpu_status_message());       \
      check_current_failed = 1;                                               \
    }                                                                         \
  } while (0)

#define CHECK_CONTAINS(haystack, needle)                                      \
  do {                                                                        \
    const char *check_h_ = (haystack);                                        \
    if (!check_h_ || !strstr(check_h_, (needle))) {                           \
      fprintf(stderr, "  %s:%d: \"%s\" does not contain \"%s\"\n", __FILE__,  \
              __LINE__, check_h_ ? check_h_ : "(null)", (needle));            \
      check_current_failed = 1;                                               \
    }                                                                         \
  } while (0)

#define TEST(name) static void name(void)

#define RUN(name)                                                             \
  do {                                                                        \
    check_current_failed = 0;                                                 \
    name();                                                                   \
    if (check_current_failed) {                                               \
      check_failed_tests++;                                                   \
      fprintf(stderr, "FAIL %s\n", #name);                                    \
    } else {                                                                  \
      check_passed_tests++;                                                   \
    }                                                                         \
  } while (0)

static inline int check_report(void) {
  printf("%d passed, %d failed\n", check_passed_tests, check_failed_tests);
  return check_failed_tests ? 1 : 0;
}

#endif /* TPU_TESTS_CHECK_H */
