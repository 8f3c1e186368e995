/*
 * host/main.c — bin/outlierlab: embeds LuaJIT, initialises MPI when a launcher started it
 * (a single process runs without mpirun, as one rank), points package.path at <root>/lua and hands the command line to the
 * Lua side (outlierlab.cli). A Lua error prints one line (a user error) or its traceback (an
 * internal error, or any under --debug) and exits non-zero; under several ranks the failing
 * rank prints its message and aborts the job.
 */
#define _GNU_SOURCE
#include <lua.h>
#include <lualib.h>
#include <lauxlib.h>
#include <mpi.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <omp.h>
#include "../outlierlab.h"

/* The message handler of every protected call: outlierlab.cli's format_error (one line for a
 * user error, the traceback for an internal one or under --debug) while the failing stack is
 * still there; before the package is loaded, the value with a traceback. An error value that
 * is not a string is printed through tostring, never as "(error object is not a string)". */
static int traceback(lua_State *L) {
    lua_getglobal(L, "package");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "loaded");
        if (lua_istable(L, -1)) {
            lua_getfield(L, -1, "outlierlab.cli");
            if (lua_istable(L, -1)) {
                lua_getfield(L, -1, "format_error");
                if (lua_isfunction(L, -1)) {
                    lua_pushvalue(L, 1);
                    if (lua_pcall(L, 1, 1, 0) == 0 && lua_isstring(L, -1)) return 1;
                }
            }
        }
    }
    lua_settop(L, 1);
    if (!lua_isstring(L, 1)) {
        lua_getglobal(L, "tostring");
        lua_pushvalue(L, 1);
        if (lua_pcall(L, 1, 1, 0) != 0 || !lua_isstring(L, -1)) { lua_settop(L, 1); lua_pushliteral(L, "(an error value without a text)"); }
        lua_replace(L, 1);
    }
    luaL_traceback(L, L, lua_tostring(L, 1), 1);
    return 1;
}

/* <root> = the directory above bin/, or $OUTLIERLAB_ROOT */
static void find_root(char *root, size_t n) {
    const char *env = getenv("OUTLIERLAB_ROOT");
    if (env && *env) { snprintf(root, n, "%s", env); return; }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) { snprintf(root, n, "."); return; }
    exe[len] = 0;
    char *bin = dirname(exe);
    snprintf(root, n, "%s", dirname(bin));
}

/* Started by a launcher (mpirun, srun --mpi=pmix, a PMI launcher)? A plain process does
 * not initialise MPI at all: it runs as one rank (engine/dist.c), starts faster, and its
 * children (tests spawn bin/outlierlab, mpirun) inherit no MPI environment. */
static int launched_by_mpi(void) {
    if (getenv("OUTLIERLAB_NO_MPI")) return 0;
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK") || getenv("PMI_SIZE");
}

int main(int argc, char **argv) {
    /* OpenMP threads that spin while they wait for work steal the core from whoever holds
     * it: on a shared node (other jobs, several ranks, a test runner) that made training
     * steps 6x slower here. libgomp reads its wait policy when it loads, before main, so
     * when the user has not chosen one we set PASSIVE and start again (once). */
    /* OpenBLAS likewise picks its kernels when it loads: where it falls back to old ones on a
     * CPU it does not know (engine/blas.c), we name the right ones and start again (once). */
    const char *core = ol_blas_core_hint();
    if (!getenv("OUTLIERLAB_REEXEC") && (!getenv("OMP_WAIT_POLICY") || core)) {
        if (!getenv("OMP_WAIT_POLICY")) setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
        if (core) setenv("OPENBLAS_CORETYPE", core, 1);
        setenv("OUTLIERLAB_REEXEC", "1", 1);
        execv("/proc/self/exe", argv);
        /* exec failed: carry on with the default policy and kernels */
    }
    /* OpenMP's dynamic teams (OMP_DYNAMIC=true) may give a region one thread, and a team of one
     * is not an active parallel region: OpenBLAS's OpenMP build, called from the engine's work
     * items inside it, then starts a threaded sgemm of its own and waits for helpers that never
     * come (seen on a loaded 2-core machine: every run hung). The engine's bits do not depend on
     * team sizes, so the host keeps the teams it asks for. */
    omp_set_dynamic(0);
    int provided = 0, use_mpi = launched_by_mpi();
    int rank = 0, size = 1;
    if (use_mpi) {
        MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    }

    char root[PATH_MAX];
    find_root(root, sizeof root);
    lua_State *L = luaL_newstate();
    if (!L) { fprintf(stderr, "outlierlab: cannot create the Lua state\n"); if (use_mpi) MPI_Finalize(); return 1; }
    luaL_openlibs(L);

    char code[3 * PATH_MAX + 256];
    snprintf(code, sizeof code,
             "package.path = '%s/lua/?.lua;%s/lua/?/init.lua;' .. package.path\n"
             "OUTLIERLAB_ROOT = '%s'\n", root, root, root);
    if (luaL_dostring(L, code) != 0) {
        fprintf(stderr, "outlierlab: %s\n", lua_tostring(L, -1));
        lua_close(L); if (use_mpi) MPI_Finalize(); return 1;
    }
    lua_newtable(L);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
    lua_setglobal(L, "arg");

    lua_pushcfunction(L, traceback);
    lua_getglobal(L, "require");
    lua_pushstring(L, "outlierlab.cli");
    int rc = lua_pcall(L, 1, 1, 1);
    if (rc == 0) {
        lua_getfield(L, -1, "main");
        lua_remove(L, -2);
        lua_getglobal(L, "arg");
        rc = lua_pcall(L, 1, 1, 1);
    }
    int status = 0;
    if (rc != 0) {
        const char *msg = lua_tostring(L, -1);
        if (size > 1) fprintf(stderr, "outlierlab: rank %d of %d: %s\n", rank, size, msg ? msg : "?");
        else fprintf(stderr, "outlierlab: %s\n", msg ? msg : "?");
        fflush(stderr);
        if (size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
        status = 1;
    } else if (lua_isnumber(L, -1)) {
        status = (int)lua_tointeger(L, -1);
    }
    lua_close(L);
    if (use_mpi) MPI_Finalize();
    return status;
}
