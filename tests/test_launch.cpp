// tests/test_launch.cpp: llmc/parallel/launch.h's id exchange without MPI, for tests/t_comm.sh. Every rank prints
//   "rank R of W local L: <the 128-byte blob in hex>"
// after the exchange; rank 0's blob is random (std::random_device), so equal lines mean the blob travelled.
//   test_launch                       the exchange (TCP or file, as the environment says)
//   test_launch --odd-layout R        rank R passes another layout string than the others (must stop the job)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include "llmc/parallel/launch.h"

int main(int argc, char** argv) {
    LaunchInfo li = launch_info();
    int odd = argc > 2 && strcmp(argv[1], "--odd-layout") == 0 ? atoi(argv[2]) : -1;
    unsigned char blob[128] = {0};
    if (li.rank == 0) {
        std::random_device rd;
        for (unsigned char& b : blob) b = (unsigned char)rd();
    }
    std::string layout = launch_layout(argc, argv) + (li.rank == odd ? " (this rank differs)" : "");
    launch_exchange_id(li, blob, sizeof(blob), layout);
    printf("rank %d of %d local %d: ", li.rank, li.world, li.local_rank);
    for (unsigned char b : blob) printf("%02x", b);
    printf("\n");
    fflush(stdout);
    // no launch_done: with no collective after the exchange, rank 0 cannot know the others have read the
    // id file (tests/t_comm.sh removes it)
    return 0;
}
