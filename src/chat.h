/*
 * chat.h — internals of the chat-template API (hydra_chat_* in hydra.h):
 * the table of built-in templates for `--chat-template NAME`.
 */
#ifndef HYDRA_CHAT_H
#define HYDRA_CHAT_H

#include "hydra.h"

typedef struct chat_builtin {
    const char *name;   /* what --chat-template takes */
    const char *source; /* the file in ../shared/chat/ it is a copy of, or NULL (hydra's own) */
    const char *text;
} chat_builtin;

/* Ends with a NULL name (chat_builtin.c). */
extern const chat_builtin chat_builtins[];

/* The names in table order, ", "-separated (a test checks they agree). */
extern const char chat_builtin_names[];

#endif
