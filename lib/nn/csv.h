/* csv: a table of numbers as comma-separated text (what pandas' to_csv and spreadsheets write):
 * a header line naming the columns, then one sample per line; the label column is named by the
 * caller, every other column is a feature, in the file's order.
 *
 * Accepted: a UTF-8 byte order mark; LF or CRLF line ends; blank lines (skipped); fields in
 * double quotes ("" inside for a quote); spaces around a field; True and False (pandas' booleans)
 * as 1 and 0. Refused, each with the line and the column named: a row with another number of
 * fields than the header; an empty cell or one that is not a finite number (NaN, inf, text); a
 * label that is not an integer in [0, 65535] (class names must be mapped to integers first); a
 * line break inside a quoted field; a first column without a name (a pandas index). */
#ifndef GEM_CSV_H
#define GEM_CSV_H
#include <stddef.h>

#include "nn/samples.h"

/* Parse the CSV text of len bytes at buf (written to in place; buf[len] must be a NUL byte)
 * into s: float32 features of shape (D), D the number of columns but the label's. what names
 * the file in an error. */
int csv_parse(char *buf, size_t len, const char *what, const char *label, struct samples *s,
	      char *err);
/* csv_parse of the file at path, gzip'd or plain. */
int csv_load(const char *path, const char *label, struct samples *s, char *err);
#endif
