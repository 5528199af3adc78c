// Partitioned plans (format 1.2, docs/plan.md "Partitioned plans"): every rank's nested plan is validated
// exactly like a plain plan, then the ranks are checked against each other: indices and stages, the limits
// they share, the head on the last stage only, and every collective and send/recv executed on paper, so that
// a plan that loads cannot hang the ranks or hand a peer rows of the wrong width.
#include <deque>
#include <map>
#include <tuple>

#include "runtime/plan.h"

namespace smelt::runtime {

namespace fb = smelt::plan;

namespace {

std::string str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

std::string list_str(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

}  // namespace

void Plan::validate_partitioned() {
  const fb::Plan& p = *fb_;
  if (p.ops() && p.ops()->size() > 0) fail("has ranks and top-level ops; a partitioned plan's ops live in its ranks");
  if (p.programs() && p.programs()->size() > 0)
    fail("has ranks and top-level programs; a partitioned plan's programs live in its ranks");
  tp_ = p.tp();
  pp_ = p.pp();
  if (tp_ < 1 || tp_ > 1024 || pp_ < 1 || pp_ > 1024)
    fail("has tp " + std::to_string(tp_) + " and pp " + std::to_string(pp_) + "; each must lie in [1, 1024]");
  const int n = tp_ * pp_;
  if (int(p.ranks()->size()) != n)
    fail("has " + std::to_string(p.ranks()->size()) + " ranks, but tp " + std::to_string(tp_) + " x pp " +
         std::to_string(pp_) + " = " + std::to_string(n));
  ranks_.resize(size_t(n));
  for (const fb::Rank* r : *p.ranks()) {
    const int i = r->index();
    const std::string which = "rank " + std::to_string(i);
    if (i < 0 || i >= n) fail("has rank index " + std::to_string(i) + ", outside [0, " + std::to_string(n) + ")");
    if (ranks_[size_t(i)].plan) fail("has " + which + " twice");
    if (r->stage() != i / tp_ || r->tp_rank() != i % tp_)
      fail(which + " has stage " + std::to_string(r->stage()) + " and tp_rank " + std::to_string(r->tp_rank()) +
           ", but index = stage * tp + tp_rank needs stage " + std::to_string(i / tp_) + " and tp_rank " +
           std::to_string(i % tp_));
    if (!(r->share() > 0.0 && r->share() <= 1.0))
      fail(which + " has share " + std::to_string(r->share()) + ", outside (0, 1]");
    if (!r->plan() || r->plan()->size() == 0) fail(which + " has no plan");

    // The nested plan gets its own aligned copy of its bytes and is validated as a plain plan that knows
    // its place: rank index (collective groups, peers) and whether it must produce logits.
    auto nested = std::unique_ptr<Plan>(new Plan());
    nested->path_ = path_ + " " + which;
    nested->bytes_.assign(r->plan()->Data(), r->plan()->Data() + r->plan()->size());
    nested->major_ = major_;
    nested->minor_ = minor_;
    nested->tp_ = tp_;
    nested->pp_ = pp_;
    nested->rank_index_ = i;
    nested->n_ranks_ = n;
    nested->expect_logits_ = r->stage() == pp_ - 1;
    if (p.options())
      for (const fb::KeyValue* kv : *p.options()) nested->inherited_options_[str(kv->key())] = str(kv->value());
    flatbuffers::Verifier verifier(nested->bytes_.data(), nested->bytes_.size());
    if (!verifier.VerifyBuffer<fb::Plan>(nullptr)) nested->fail("is corrupt: its plan flatbuffer does not verify");
    nested->fb_ = flatbuffers::GetRoot<fb::Plan>(nested->bytes_.data());
    if (nested->fb_->ranks() && nested->fb_->ranks()->size() > 0) nested->fail("has ranks of its own; ranks do not nest");
    nested->validate_single();
    Rank& out = ranks_[size_t(i)];
    out.index = i;
    out.stage = r->stage();
    out.tp_rank = r->tp_rank();
    out.arch = str(r->arch());
    out.share = r->share();
    out.plan = std::move(nested);
  }

  // One sequence runs through every rank: the same chunk sizes, positions and (last stage) vocab.
  const Plan& head = *ranks_[size_t(output_rank())].plan;
  for (const Rank& r : ranks_) {
    const Plan& rp = *r.plan;
    if (rp.fb_->max_rows() != head.fb_->max_rows() || rp.fb_->max_seq_len() != head.fb_->max_seq_len())
      rp.fail("has max_rows " + std::to_string(rp.fb_->max_rows()) + " and max_seq_len " +
              std::to_string(rp.fb_->max_seq_len()) + ", rank " + std::to_string(output_rank()) + " has " +
              std::to_string(head.fb_->max_rows()) + " and " + std::to_string(head.fb_->max_seq_len()));
    bool last = r.stage == pp_ - 1;
    if (last && rp.vocab() != head.vocab())
      rp.fail("has logits of " + std::to_string(rp.vocab()) + " columns, rank " + std::to_string(output_rank()) +
              " of " + std::to_string(head.vocab()));
    // Programs (the DSpark drafter) run on the last stage, which holds the head.
    if (!last && !rp.programs().empty())
      rp.fail("has program '" + rp.programs()[0].name + "' but is not on the last stage; programs run there");
    if (last) {
      for (const Program& prog : head.programs())
        if (!rp.program(prog.name)) rp.fail("lacks program '" + prog.name + "', which rank " + std::to_string(output_rank()) + " has");
      if (rp.programs().size() != head.programs().size())
        rp.fail("has " + std::to_string(rp.programs().size()) + " programs, rank " + std::to_string(output_rank()) +
                " has " + std::to_string(head.programs().size()));
    }
  }
  validate_exchange("");
  for (const Program& prog : head.programs()) validate_exchange(prog.name);
}

// Runs the collectives of one entry point on paper: sends are buffered (they never block), a recv waits for
// its (peer, tag) message, a collective waits until every member of its group stands at a collective with
// the same group. If the ranks get stuck, the plan would deadlock; if members meet with different kinds or
// widths, or a message is received with another width or never received, the plan is wrong.
void Plan::validate_exchange(const std::string& program) {
  const int n = int(ranks_.size());
  const std::string in = program.empty() ? "the forward" : "program " + program;
  static const std::vector<OpRef> kNone;
  std::vector<const std::vector<OpRef>*> lists(size_t(n), &kNone);
  for (int r = 0; r < n; ++r) {
    const Plan& rp = *ranks_[size_t(r)].plan;
    if (program.empty()) lists[size_t(r)] = &rp.ops();
    else if (const Program* prog = rp.program(program)) lists[size_t(r)] = &prog->ops;
  }
  std::vector<size_t> pc(size_t(n), 0);
  auto at = [&](int r) -> const OpRef* {  // the next collective of rank r, nullptr when it has none left
    const auto& ops = *lists[size_t(r)];
    while (pc[size_t(r)] < ops.size() && !is_collective(ops[pc[size_t(r)]].spec->kind)) ++pc[size_t(r)];
    return pc[size_t(r)] < ops.size() ? &ops[pc[size_t(r)]] : nullptr;
  };
  auto where = [&](int r, const OpRef& op) { return "rank " + std::to_string(r) + " " + op.where(); };
  auto width = [&](int r, int buffer) { return ranks_[size_t(r)].plan->row_elems(buffer); };
  struct Message {
    const OpRef* op;
    int64_t width;
  };
  std::map<std::tuple<int, int, int64_t>, std::deque<Message>> mail;  // (from, to, tag)

  for (;;) {
    bool progress = false, done = true;
    for (int r = 0; r < n; ++r) {
      const OpRef* op = at(r);
      if (!op) continue;
      done = false;
      OpKind kind = op->spec->kind;
      int peer = int(kind == OpKind::Send || kind == OpKind::Recv ? op->i("peer") : 0);
      if (kind == OpKind::Send) {
        mail[{r, peer, op->i("tag")}].push_back({op, width(r, op->inputs[0])});
        ++pc[size_t(r)];
        progress = true;
      } else if (kind == OpKind::Recv) {
        auto& box = mail[{peer, r, op->i("tag")}];
        if (box.empty()) continue;
        if (box.front().width != width(r, op->outputs[0]))
          fail(where(r, *op) + " receives rows of " + std::to_string(width(r, op->outputs[0])) + " from rank " +
               std::to_string(peer) + " tag " + std::to_string(op->i("tag")) + ", but the matching " +
               where(peer, *box.front().op) + " sends rows of " + std::to_string(box.front().width));
        box.pop_front();
        ++pc[size_t(r)];
        progress = true;
      } else {
        // The group's first member completes the collective once every member stands at it.
        const std::vector<int64_t>& group = op->ints("group");
        if (group[0] != r) continue;
        bool ready = true;
        for (int64_t m : group) {
          const OpRef* o = at(int(m));
          ready = ready && o && (o->spec->kind == OpKind::AllReduce || o->spec->kind == OpKind::AllGather) &&
                  o->ints("group") == group;
        }
        if (!ready) continue;
        for (int64_t m : group) {
          const OpRef& o = *at(int(m));
          std::string mismatch;
          if (o.spec->kind != kind) mismatch = "is " + o.name;
          else if (kind == OpKind::AllReduce && width(int(m), o.outputs[0]) != width(r, op->outputs[0]))
            mismatch = "reduces rows of " + std::to_string(width(int(m), o.outputs[0]));
          else if (kind == OpKind::AllGather && o.ints("widths") != op->ints("widths"))
            mismatch = "has widths " + list_str(o.ints("widths"));
          if (!mismatch.empty())
            fail(in + ": " + where(int(m), o) + " meets " + where(r, *op) + " on group " + list_str(group) +
                 " but " + mismatch + " (" + where(r, *op) + " is " + op->name +
                 (kind == OpKind::AllReduce ? " of rows of " + std::to_string(width(r, op->outputs[0]))
                                            : " with widths " + list_str(op->ints("widths"))) + ")");
        }
        for (int64_t m : group) ++pc[size_t(m)];
        progress = true;
      }
    }
    if (done) break;
    if (!progress) {
      std::string stuck;
      for (int r = 0, shown = 0; r < n && shown < 4; ++r) {
        const OpRef* op = at(r);
        if (!op) continue;
        ++shown;
        stuck += (stuck.empty() ? "" : "; ") + where(r, *op) +
                 (op->spec->kind == OpKind::Recv
                      ? " waits for tag " + std::to_string(op->i("tag")) + " from rank " + std::to_string(op->i("peer"))
                      : " waits for group " + list_str(op->ints("group")));
      }
      fail(in + " would deadlock: " + stuck);
    }
  }
  for (const auto& [key, box] : mail)
    if (!box.empty())
      fail(in + ": " + where(std::get<0>(key), *box.front().op) + " sends tag " + std::to_string(std::get<2>(key)) +
           " to rank " + std::to_string(std::get<1>(key)) + ", which never receives it");
}

}  // namespace smelt::runtime
