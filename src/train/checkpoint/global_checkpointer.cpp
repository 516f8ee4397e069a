#include "train/checkpoint/global_checkpointer.h"

#include <vector>

#include "core/error.h"
#include "train/checkpoint/global_checkpoint.h"
#include "train/tokenizer.h"

namespace mt {

void GlobalCheckpointer::save(int step) {
  Session& s = s_;
  const ParamTable& table = s.model.table();
  GlobalTensors gp, gm, gv;
  {
    // Gathered over dp first (this rank's tensors, table layout), then over tp and to
    // rank 0 (global_view.h).
    std::vector<float> buf(table.total());
    s.dp.gather_params(buf.data());
    gp = s.view->gather(table, buf.data(), s.tp());
    s.dp.gather_dense(s.opt.exp_avg().data(), buf.data());
    gm = s.view->gather(table, buf.data(), s.tp());
    s.dp.gather_dense(s.opt.exp_avg_sq().data(), buf.data());
    gv = s.view->gather(table, buf.data(), s.tp());
  }
  const std::vector<NamedTensor> biases = s.view->router_biases_to_lead();
  if (s.lead())
    save_checkpoint(s.opts.io.save, s.view->whole(), s.opts.model, gp, gm, gv,
                    {step, s.train.position(), s.opts.optim.seed, s.opts.run_config}, biases,
                    tokenizer_metadata(s.opts.io.tokenizer));
  s.ctx.world->barrier().wait();  // the directory is complete when every rank goes on
}

std::string GlobalCheckpointer::finish(int last_step) {
  save(last_step);
  return "";
}

void load_global_session(Session& s) {
  const std::string& dir = s.opts.io.load;
  const ParamTable& table = s.model.table();
  std::vector<float> p(table.total()), m(table.total()), v(table.total());
  const TrainState st = load_checkpoint(dir, table, {p.data(), m.data(), v.data()});
  MT_REQUIRE(st.step <= s.opts.optim.steps, "--load ", dir, " is at step ", st.step,
             ", beyond --steps ", s.opts.optim.steps);
  s.dp.load_params(p.data());
  s.dp.scatter_dense(m.data(), s.opt.exp_avg().data());
  s.dp.scatter_dense(v.data(), s.opt.exp_avg_sq().data());
  load_router_biases(dir, table, s.moe);
  s.start_step = st.step;
  s.train.set_position(st.data_position);
}

}  // namespace mt
