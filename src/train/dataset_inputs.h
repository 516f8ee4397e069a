// --data / --val-data naming a dataset directory of `meshtrain prepare` (data/prepare.h),
// and the checks that keep a run's tokenizer consistent, all before any rank starts.
#pragma once

#include "train/options.h"

namespace mt {

// A dataset directory in --data becomes its train split (every shard, one stream), its
// tokenizer and its bytes per token; its validation split becomes --val-data unless one is
// given (which may itself be a dataset directory: its val split). Plain shard files are
// left as they are. Throws UsageError for a directory that is not a dataset, a dataset
// whose tokenizer file is missing or changed, or val data of another tokenizer.
void resolve_dataset_inputs(TrainOptions& o);

// Weights a run starts from (--init-from FILE, --load DIR) that record a tokenizer must
// have been trained with the data's tokenizer: the ids would mean other text. Throws
// UsageError naming both.
void check_weights_tokenizer(const TrainOptions& o);

}  // namespace mt
