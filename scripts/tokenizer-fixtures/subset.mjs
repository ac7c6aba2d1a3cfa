// The part of a BPE tokenizer.json that a set of encodings needs: all single-character
// tokens (the 256 bytes of a byte-level vocabulary, every character a SentencePiece-style
// vocabulary has, so that no character falls back to bytes only in the subset), the 256
// "<0xNN>" byte-fallback tokens and the unk token, the added tokens, every token the
// encodings use, and, closed recursively, every merge that produces a kept token. BPE on the
// subset applies the same merges in the same order, so it gives the same ids (the callers
// check this by encoding every text again with the reference on the subset file).
// The added tokens are put in the vocab with their ids (see the note at the end).
// Every merge (as [left, right]) and the tokens kept by closure from `ids`.
export function subset(full, idLists) {
  const model = full.model;
  const merges = model.merges.map((m) => (typeof m === 'string' ? m.split(' ') : m));
  const byResult = new Map();
  merges.forEach(([a, b], rank) => {
    const r = a + b;
    if (!byResult.has(r)) byResult.set(r, []);
    byResult.get(r).push(rank);
  });
  const idToToken = new Map(Object.entries(model.vocab).map(([t, i]) => [i, t]));
  const keep = new Set();
  const keepRanks = new Set();
  const stack = [];
  const add = (t) => { if (!keep.has(t)) { keep.add(t); stack.push(t); } };
  for (const [t, i] of Object.entries(model.vocab)) if ([...t].length === 1 && i < 1e9) {
    // single characters: the 256 byte tokens (and any other single-character token, harmless)
    add(t);
  }
  // byte-fallback tokens and the unk token, which any text may need
  for (const t of Object.keys(model.vocab)) if (/^<0x[0-9A-F]{2}>$/.test(t) || t === model.unk_token) add(t);
  for (const ids of idLists) for (const id of ids) if (idToToken.has(id)) add(idToToken.get(id));
  while (stack.length) {
    const t = stack.pop();
    for (const rank of byResult.get(t) || []) {
      keepRanks.add(rank);
      add(merges[rank][0]);
      add(merges[rank][1]);
    }
  }
  const out = structuredClone(full);
  out.model.vocab = Object.fromEntries(Object.entries(model.vocab).filter(([t]) => keep.has(t)));
  // Hugging Face ignores the ids written for added tokens: one whose content is in the vocab
  // takes that id, the others are numbered on from the vocab's size. In the subset, the added
  // tokens go into the vocab with their ids, so that they keep them.
  for (const a of full.added_tokens || []) if (!(a.content in model.vocab)) out.model.vocab[a.content] = a.id;
  out.model.merges = model.merges.filter((_, rank) => keepRanks.has(rank));
  return out;
}

