// Lock contracts that clang's -Wthread-safety checks at compile time
// (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html); under any other compiler (the normal
// build is GCC) they expand to nothing.
//
//   Mutex mu_;
//   int n_ PREFIXD_GUARDED_BY(mu_);               // read or written only with mu_ held
//   void BumpLocked() PREFIXD_REQUIRES(mu_);      // the caller holds mu_
//   void Flush() PREFIXD_EXCLUDES(mu_);           // the caller does not (it takes mu_ itself)
//
// The names carry a prefix: plain ones (RELEASE, REQUIRES, ...) are common words that other
// headers define (<scsi/scsi.h> has RELEASE). scripts/check-thread-safety.sh runs the analysis.
#pragma once

#if defined(__clang__)
#define PREFIXD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PREFIXD_THREAD_ANNOTATION(x)
#endif

// A class whose objects are locks (Mutex).
#define PREFIXD_CAPABILITY(name) PREFIXD_THREAD_ANNOTATION(capability(name))
// An RAII class that holds a lock from its constructor to its destructor (MutexLock).
#define PREFIXD_SCOPED_CAPABILITY PREFIXD_THREAD_ANNOTATION(scoped_lockable)

// A field read or written only with the lock held.
#define PREFIXD_GUARDED_BY(x) PREFIXD_THREAD_ANNOTATION(guarded_by(x))
// A pointer whose pointee is read or written only with the lock held.
#define PREFIXD_PT_GUARDED_BY(x) PREFIXD_THREAD_ANNOTATION(pt_guarded_by(x))

// Lock order: this lock is taken before / after the ones named (-Wthread-safety-beta checks it).
#define PREFIXD_ACQUIRED_BEFORE(...) PREFIXD_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define PREFIXD_ACQUIRED_AFTER(...) PREFIXD_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// The caller holds the locks / does not hold them.
#define PREFIXD_REQUIRES(...) PREFIXD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define PREFIXD_EXCLUDES(...) PREFIXD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// The function takes / releases the locks (no argument: `this`, on a lock's own methods).
#define PREFIXD_ACQUIRE(...) PREFIXD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define PREFIXD_RELEASE(...) PREFIXD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// The function takes the lock when it returns `ret` (try_lock).
#define PREFIXD_TRY_ACQUIRE(...) PREFIXD_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// The function returns a reference to the lock named.
#define PREFIXD_RETURN_CAPABILITY(x) PREFIXD_THREAD_ANNOTATION(lock_returned(x))

// Turns the analysis off for one function; say why next to it.
#define PREFIXD_NO_THREAD_SAFETY_ANALYSIS PREFIXD_THREAD_ANNOTATION(no_thread_safety_analysis)
