/* thread_names.h: how many of this process's threads carry a given name (their
 * /proc/self/task/<tid>/comm), for the tests that the C core names its threads. */
#ifndef TPU_TESTS_THREAD_NAMES_H
#define TPU_TESTS_THREAD_NAMES_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>

/* -1 if /proc cannot be read. */
static inline int threads_named(const char *name) {
  DIR *dir = opendir("/proc/self/task");
  if (!dir) return -1;
  int count = 0;
  struct dirent *e;
  while ((e = readdir(dir)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%.20s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue; /* the thread ended meanwhile */
    if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = '\0';
    fclose(f);
    count += strcmp(comm, name) == 0;
  }
  closedir(dir);
  return count;
}

#endif /* TPU_TESTS_THREAD_NAMES_H */
