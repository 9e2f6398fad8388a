/* Pieces the dlcc command's subcommands share. */
#ifndef DLCC_DRIVER_H
#define DLCC_DRIVER_H

#include <stdbool.h>

#include "frontend/ast.h"

/* "NAME=INTEGER" -> d (d->name malloc'd). */
bool driver_parse_define(const char *text, Define *d);
/* `dlcc run ARGS`: argv holds what follows "run". */
int driver_run(int argc, char **argv);

#endif
