// The attention weights of one decoded sequence, for pictures of what the model attended to
// (translate / generate with SearchOptions::attention, or generate's `attention` argument).
//
// Every tensor is (heads, queries, keys), f32, contiguous; each row is a softmax over the keys the
// query could see (it sums to 1; keys it could not see are 0: later positions in self-attention).
//
// Translation (search.h), with S the source's tokens and n the hypothesis' tokens:
//   queries are the decoder's positions 0..n, whose inputs are BOS, y1, ..., yn and which chose
//   y1, ..., yn, EOS; T = n + 1.
//   encoder_self[l]  (H, S, S)  the source attending to itself, encoder layer l
//   decoder_self[l]  (H, T, T)  the output so far attending to itself, decoder layer l
//   cross[l]         (H, T, S)  each output position attending to the source, decoder layer l
// For beam search these are the hypothesis' own weights: the rows of the beams it descends from,
// step by step through every reordering.
// Generation (generate.h): decoder_self[l] (H, T, T) over the T tokens the model read: the prompt
// (as fitted to the context) and the new tokens it fed back (the last new token is never read).
// encoder_self and cross are empty.
#pragma once
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::decoding {

struct AttentionWeights {
  std::vector<Tensor> encoder_self;  // per encoder layer (H, S, S)
  std::vector<Tensor> decoder_self;  // per decoder layer (H, T, T)
  std::vector<Tensor> cross;         // per decoder layer (H, T, S)
  bool empty() const { return encoder_self.empty() && decoder_self.empty() && cross.empty(); }
};

}  // namespace qkv::decoding
