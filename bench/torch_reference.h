/* torch_reference.h: the PyTorch CPU column of the C kernel benchmarks. Writes |script| (a
 * Python program printing one time in µs per line) to |path|, runs it with the repo's
 * .venv, and reads |n| times into |out|. Returns 0 when there is no .venv or a line is
 * missing (the benchmark then prints only its own column). Header-only: each benchmark is
 * one translation unit built by the command in its header. */
#ifndef TPU_BENCH_TORCH_REFERENCE_H
#define TPU_BENCH_TORCH_REFERENCE_H

#include <stdio.h>
#include <unistd.h>

static int torch_reference_us(const char *script, const char *path, int n, double *out) {
  if (access(".venv/bin/python", X_OK) != 0) return 0;
  FILE *f = fopen(path, "w");
  if (!f) return 0;
  fputs(script, f);
  fclose(f);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python %s 2>/dev/null",
           path);
  FILE *p = popen(cmd, "r");
  if (!p) return 0;
  int got = 0;
  for (int r = 0; r < n; r++) got += fscanf(p, "%lf", &out[r]) == 1;
  pclose(p);
  return got == n;
}

#endif /* TPU_BENCH_TORCH_REFERENCE_H */
