/* Reads a file on a tiercache --zero-copy mount through the C API and writes it to stdout;
 * with a third argument "update", first writes "from C" at the start of block 0 (an update:
 * a private copy of the block, committed on release) and syncs. Build: cc -I<dir of tiercache.h> read.c -ltiercache_capi */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "tiercache.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MOUNTPOINT FILE [update]\n", argv[0]);
        return 2;
    }
    int update = argc > 3 && strcmp(argv[3], "update") == 0;
    TcClient *c = tc_connect(argv[1]);
    if (!c) {
        fprintf(stderr, "tc_connect: %s (errno %d)\n", tc_last_error(), errno);
        return 1;
    }
    TcFile *f = tc_open(c, argv[2], update);
    if (!f) {
        fprintf(stderr, "tc_open: %s\n", tc_last_error());
        tc_disconnect(c);
        return 1;
    }
    if (update) {
        TcBlock *b = tc_write_block(f, 0);
        if (!b) {
            fprintf(stderr, "tc_write_block: %s\n", tc_last_error());
            return 1;
        }
        memcpy(tc_block_data_mut(b), "from C", 6);
        if (tc_block_release(b) < 0) {
            fprintf(stderr, "tc_block_release: %s\n", tc_last_error());
            return 1;
        }
        if (tc_sync(f, 0, 0, 0) < 0) {
            fprintf(stderr, "tc_sync: %s\n", tc_last_error());
            return 1;
        }
    }
    size_t bs = tc_block_size(c);
    uint64_t size = tc_size(f);
    uint64_t nblocks = (size + bs - 1) / bs;
    for (uint64_t first = 0; first < nblocks; first += 8) {
        TcBlock *blocks[8];
        uint64_t want = nblocks - first < 8 ? nblocks - first : 8;
        int64_t n = tc_read_blocks(f, first, want, blocks);
        if (n < 0) {
            fprintf(stderr, "tc_read_blocks: %s\n", tc_last_error());
            return 1;
        }
        for (int64_t i = 0; i < n; i++) {
            uint64_t off = (first + (uint64_t)i) * bs;
            size_t len = size - off < bs ? (size_t)(size - off) : bs;
            fwrite(tc_block_data(blocks[i]), 1, len, stdout);
            tc_block_release(blocks[i]);
        }
    }
    tc_close(f);
    tc_disconnect(c);
    return 0;
}
