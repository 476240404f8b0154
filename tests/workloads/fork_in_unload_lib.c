/* A library of the fork_in_unload workload whose destructor forks: the child is born inside
 * dlclose. It says which process it is in through VT_FORKED_IN_UNLOAD. */
#include <stdlib.h>
#include <unistd.h>

__attribute__((destructor)) static void fork_on_unload(void) {
    pid_t pid = fork();
    if (pid == 0) setenv("VT_FORKED_IN_UNLOAD", "child", 1);
    else if (pid > 0) {
        char buf[32];
        int n = 0;
        for (pid_t p = pid; p > 0 && n < 30; p /= 10) n++;
        buf[n] = 0;
        for (pid_t p = pid; n > 0; p /= 10) buf[--n] = (char)('0' + p % 10);
        setenv("VT_FORKED_IN_UNLOAD", buf, 1);
    }
}
