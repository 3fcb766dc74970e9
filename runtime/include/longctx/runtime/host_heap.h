#pragma once
// Where the CPU virtual device's memory comes from: the C heap, each freed block kept for the
// next request of its size, as a GPU's caching allocator keeps its blocks.
//
// Why not LibTorch's default CPU allocator: it asks posix_memalign for 64-byte alignment
// (c10/core/impl/alloc_cpu.cpp, alloc_cpu), and glibc serves an aligned request of n bytes
// from a free chunk only when that chunk holds n plus the alignment plus a minimum chunk
// (malloc/malloc.c, _int_memalign): a block freed by the last step is a few bytes too small
// for the same request in this one, the heap grows instead, and every 4 KiB of the new block
// page-faults (and is zeroed by the kernel) at first touch. glibc also unmaps a freed block
// above its mmap threshold and trims the heap's top. Measured on tiny-gqa at 2K tokens: about
// 6% of the step, most of it in the loss, whose [n, V] buffers are the step's largest. No
// GPU step pays that, and the cost model does not charge it (docs/performance.md).
#include <c10/core/Allocator.h>

namespace longctx::runtime {

// An allocator of 64-byte aligned host blocks from malloc, each request of n bytes made as the
// same plain malloc request, so that glibc's bins hand a freed block of that size back.
// Thread-safe (malloc is). Throws c10::OutOfMemoryError when malloc fails, as LibTorch's does.
c10::Allocator& host_heap_allocator();

// Makes glibc's malloc keep what is freed while the process runs: blocks up to 32 MiB (the
// largest mmap threshold glibc accepts with 64-bit longs) come from the heap, never mapped
// and unmapped each time, and the heap's top is never trimmed. Process-wide; idempotent.
// Returns false where the C library is not glibc or refuses the setting (the defaults stay).
bool keep_freed_host_memory();

}  // namespace longctx::runtime
