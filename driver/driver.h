/* Pieces the dlcc command's subcommands share. */
#ifndef DLCC_DRIVER_H
#define DLCC_DRIVER_H

#include <stdbool.h>
#include <stdio.h>

#include "codegen/codegen.h"
#include "frontend/ast.h"
#include "passes/pass.h"

/* "NAME=INTEGER" -> d (d->name malloc'd). */
bool driver_parse_define(const char *text, Define *d);
/* -O0/-O1/-O2, --passes=..., --print-after=..., ... into po: 1 when arg
 * is one of them, 0 when not, -1 after printing an error. */
int driver_pass_option(const char *arg, PassOptions *po);
/* The kernel-IR passes' switches (--unroll=N, --no-unroll,
 * --no-vectorize) for cg_compile_opts. */
CgOptions driver_cg_options(const PassOptions *po);
/* `dlcc run ARGS`: argv holds what follows "run". */
int driver_run(int argc, char **argv);
/* `dlcc memplan FILE.csv [options]` (memplan.c): argv holds what follows
 * "memplan"; the answer to out, errors to err. */
int driver_memplan(int argc, char **argv);
int driver_memplan_to(int argc, char **argv, FILE *out, FILE *err);

#endif
