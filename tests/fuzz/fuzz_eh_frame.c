// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target for the .eh_frame interpreter (user/stacks/eh_frame.c), built with ASan and
 * UBSan: the input is an .eh_frame section's bytes (the target's binaries are input the tool
 * does not control), its rows then checked sorted and looked up at every row's pc.
 *
 *   make build/fuzz/fuzz_eh_frame
 *   build/fuzz/fuzz_eh_frame tests/fuzz/corpus/eh_frame
 */
#include <stdint.h>
#include <stdlib.h>

#include "eh_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct unwind_rows rows = {};

	if (eh_frame_rows_mem(data, size, 0x1000, &rows))
		return 0;
	for (size_t i = 0; i < rows.n; i++) {
		if (i && rows.rows[i - 1].pc >= rows.rows[i].pc)
			abort();
		if (unwind_rows_find(rows.rows, rows.n, rows.rows[i].pc) != &rows.rows[i])
			abort();
	}
	unwind_rows_free(&rows);
	return 0;
}
