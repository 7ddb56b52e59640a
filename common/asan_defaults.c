/* Built into the shared objects that programs we did not build load: Slurm's plugins
 * (spank_gpupool.so, gres_gpupool.so) and the remoting libcuda.so.1. It does something only
 * in an AddressSanitizer build (scripts/test --sanitize=address): ASan then aborts in any
 * process that did not preload its runtime, and slurmd starts the SPANK job prolog and
 * epilog with an environment of its own, so no LD_PRELOAD reaches them. An abort there
 * would fail the epilog and drain the node. With these defaults ASan runs in such a
 * process without its heap checks (malloc stays libc's); where the runtime is preloaded,
 * ASAN_OPTIONS applies as usual. */
#if defined(__SANITIZE_ADDRESS__)
/* Exported (each object's version script lists it): libasan looks it up by name. */
__attribute__((visibility("default"))) const char* __asan_default_options(void);
__attribute__((visibility("default"))) const char* __asan_default_options(void) {
  return "verify_asan_link_order=0:detect_leaks=0";
}
#endif
