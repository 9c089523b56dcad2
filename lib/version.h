/* version.h — the one place the version lives. */
#ifndef SELFSUP_VERSION_H
#define SELFSUP_VERSION_H
#define SELFSUP_VERSION "0.1.0"
#endif
