// Replay and recovery: a replacement GPU rebuilt from the last checkpoint and the journal,
// or handed the state over by the old GPU's agent when it still answers.
#include <thread>
#include <vector>

#include "remote/client/failover/failover_internal.h"

namespace gpupool::client {

// A GPU keeps no dirty bits, but the log says exactly what copies from the host
// and memsets wrote, and a copy between two ranges whose contents are known
// writes known contents: those ranges' images are the previous checkpoint's with
// the log applied, on the host, and only what a kernel may have written (or a
// copy from it) is read back from the GPU. A process that uploads 1 GiB is then
// checkpointed by host copies instead of a second transfer.
//
// Conservative where the log's order may not be the GPU's: a range written on two
// streams since the last checkpoint, or read from a range written on another
// stream, is read back; so is a range a kernel may have written, even if a copy
// overwrote it later.
//
// Two passes over the same log with the same decisions: `apply` false only
// classifies (*unknown: to read back; *made: images the log makes); `apply`
// true, once the reads have succeeded, writes the bytes into saved_ in place
// (ranges read back get scratch writes there, replaced by their reads after).
// Only the requests WritesImages names write images: Checkpoint skips the second
// pass for a log without them.
void Failover::ApplyLog(bool apply, std::set<uint64_t>* unknown, std::set<uint64_t>* made) {
  std::map<uint64_t, uint64_t> stream_of;  // range -> the stream that last wrote it
  std::set<uint64_t> allocated;            // allocated in the log: no previous image
  // The range holding [address, address + size), if one does.
  auto range_of = [&](uint64_t address, uint64_t size, uint64_t* start) {
    return RangeHolding(address, start) && size <= ranges_.at(*start) - (address - *start);
  };
  auto mark_unknown = [&](uint64_t address) {
    uint64_t start = 0;
    if (RangeHolding(address, &start)) unknown->insert(start);
  };
  // Whether the contents of `start` are known at this point of the log.
  auto known = [&](uint64_t start) {
    if (unknown->count(start) != 0) return false;
    if (made->count(start) != 0) return true;
    if (allocated.count(start) != 0) return false;
    if (image_snapshots_.count(start) != 0) return true;
    auto saved = saved_.find(start);
    return saved != saved_.end() && saved->second.size() == ranges_.at(start);
  };
  // A write of `size` bytes at `address` on `stream`: whether its bytes land in
  // the range's image on the host (false: the range is read back instead).
  auto lands = [&](uint64_t address, uint64_t size, uint64_t stream) {
    uint64_t start = 0;
    if (!range_of(address, size, &start)) {
      mark_unknown(address);
      return false;
    }
    auto last = stream_of.find(start);
    if (last != stream_of.end() && last->second != stream) unknown->insert(start);
    stream_of[start] = stream;
    if (unknown->count(start) != 0) return false;
    const bool whole = address == start && size == ranges_.at(start);
    if (!whole && !known(start)) {
      unknown->insert(start);
      return false;
    }
    made->insert(start);
    return true;
  };
  // Where the bytes of a write that lands at `address` go in its range's image.
  auto image_at = [&](uint64_t address) -> char* {
    uint64_t start = 0;
    RangeHolding(address, &start);
    JournalBytes& image = ImageBytes(start);
    image.resize(ranges_.at(start), 0);  // a whole-range write may make the first image
    return image.data() + (address - start);
  };

  // Writes that a later entry overwrites whole before anything reads them are
  // classified as usual but not applied.
  const std::vector<bool> overwritten = apply ? OverwrittenEntries() : std::vector<bool>();
  for (size_t index = 0; index < log_.size(); ++index) {
    Entry& entry = log_[index];
    const bool skip = apply && overwritten[index];
    if (skip) {
      overwritten_bytes_ += entry.op == dp::kOpMemcpyHtoD ? entry.uploaded_bytes() : 0;
    }
    switch (entry.op) {
      case dp::kOpMemAlloc: {
        dp::MemAllocArgs args{};
        if (!ReadStruct(entry.args, &args)) break;
        made->erase(args.address);
        unknown->erase(args.address);
        stream_of.erase(args.address);
        allocated.insert(args.address);
        break;
      }
      case dp::kOpMemcpyHtoD: {
        dp::MemcpyHtoDArgs args{};
        if (!ReadStruct(entry.args, &args) || entry.uploaded_bytes() != args.size) {
          mark_unknown(args.dst);
          break;
        }
        if (!lands(args.dst, args.size, args.stream) || !apply || skip) break;
        const bool kept_as_snapshot = entry.payload.empty() && entry.snapshot;
        if (auto range = ranges_.find(args.dst); range != ranges_.end() && range->second == args.size) {
          // A whole range's upload: its buffer becomes the image, or its snapshot does
          // (nothing copied: the program's pages stay write-protected, and a write to them
          // copies them first). The old image's buffer goes back to the spares with the log's.
          if (kept_as_snapshot) {
            if (auto old = saved_.find(args.dst); old != saved_.end()) {
              entry.payload.swap(old->second);
              saved_.erase(old);
            }
            image_snapshots_[args.dst] = entry.snapshot;
            break;
          }
          image_snapshots_.erase(args.dst);
          saved_[args.dst].swap(entry.payload);
          break;
        }
        if (kept_as_snapshot) {
          entry.payload = SnapshotBytes(&entry.snapshot);
        }
        CopyBytes(image_at(args.dst), entry.payload.data(), args.size, args.size);
        break;
      }
      case dp::kOpMemset: {
        dp::MemsetArgs args{};
        uint64_t size = 0;
        if (!ReadStruct(entry.args, &args) ||
            (args.element_size != 1 && args.element_size != 2 && args.element_size != 4) ||
            __builtin_mul_overflow(args.count, args.element_size, &size)) {
          mark_unknown(args.dst);
          break;
        }
        if (!lands(args.dst, size, args.stream) || !apply || skip) break;
        if (char* out = image_at(args.dst)) {
          if (args.element_size == 1) {
            std::memset(out, static_cast<int>(args.value & 0xff), size);
          } else if (size > 0) {  // one element, then doubling copies of it
            std::memcpy(out, &args.value, args.element_size);
            for (uint64_t done = args.element_size; done < size; done *= 2) {
              std::memcpy(out + done, out, std::min(done, size - done));
            }
          }
        }
        break;
      }
      case dp::kOpMemcpyDtoD: {
        dp::MemcpyDtoDArgs args{};
        uint64_t source = 0;
        if (!ReadStruct(entry.args, &args) || !range_of(args.src, args.size, &source)) {
          mark_unknown(args.dst);
          break;
        }
        auto source_stream = stream_of.find(source);
        if (!known(source) || (source_stream != stream_of.end() && source_stream->second != args.stream)) {
          mark_unknown(args.dst);
          uint64_t start = 0;
          if (range_of(args.dst, args.size, &start)) stream_of[start] = args.stream;
          break;
        }
        // The source's image is saved_[source] (made bytes first), current at this
        // point of the log; std::map keeps it in place while the destination's is
        // made, and within one range the two may overlap.
        if (!lands(args.dst, args.size, args.stream) || !apply || skip) break;
        const char* from = ImageBytes(source).data() + (args.src - source);
        std::memmove(image_at(args.dst), from, args.size);
        break;
      }
      case dp::kOpLaunch: {
        // What MarkLaunchWrites marks written is not known on the host.
        std::map<uint64_t, bool> may_write;
        MayWrite(entry, &may_write);
        for (const auto& [start, yes] : may_write) {
          unknown->insert(start);
          made->erase(start);
        }
        break;
      }
      default:
        break;
    }
  }
}

JournalBytes Failover::SnapshotBytes(HostSnapshot* snapshot) {
  JournalBytes bytes = TakePayloadBuffer(snapshot->size());
  snapshots_copied_ += snapshot->MoveInto(&bytes) ? 1 : 0;
  return bytes;
}

JournalBytes& Failover::ImageBytes(uint64_t start) {
  JournalBytes& image = saved_[start];
  if (auto kept = image_snapshots_.find(start); kept != image_snapshots_.end()) {
    image = SnapshotBytes(&kept->second);
    image_snapshots_.erase(kept);
  }
  return image;
}

bool Failover::SendSnapshot(ClientConnection* connection, const ArgBytes& args, HostSnapshot* snapshot,
                            JournalBytes* copy, std::string* why) {
  auto post = [&](const char* bytes, size_t size) {
    Status posted = connection->Post({dp::kOpMemcpyHtoD, args.data(), args.size(), bytes, size, nullptr, 0});
    if (!posted.ok()) {
      *why = posted.message();
      replay_lost_transport_ = true;
    }
    return posted.ok();
  };
  const size_t size = snapshot->size();
  if (const char* pages = snapshot->BeginRead()) {
    // The post returns once the transport has read the bytes (RpcClient::SendAmLocked).
    const bool sent = post(pages, size);
    const bool intact = snapshot->EndRead();
    if (!sent) return false;
    if (intact) return true;
  }
  *copy = SnapshotBytes(snapshot);
  return post(copy->data(), copy->size());
}

bool Failover::Send(ClientConnection* connection, Entry& entry, std::string* why, bool show_output) {
  if (entry.op == dp::kOpMemcpyHtoD && entry.payload.empty() && entry.snapshot) {
    if (!entry.call) return SendSnapshot(connection, entry.args, &entry.snapshot, &entry.payload, why);
    entry.payload = SnapshotBytes(&entry.snapshot);  // its size stays in log_bytes_
  }
  Request request{entry.op,
                  entry.args.data(),
                  entry.args.size(),
                  entry.payload.empty() ? nullptr : entry.payload.data(),
                  entry.payload.size(),
                  nullptr,
                  0};
  if (!entry.call) {
    Status posted = connection->Post(request);
    if (!posted.ok()) {
      *why = posted.message();
      replay_lost_transport_ = true;
    }
    return posted.ok();
  }
  Reply reply;
  Status called = connection->Call(request, &reply);
  if (!called.ok()) {
    *why = called.message();
    replay_lost_transport_ = true;
    return false;
  }
  if (reply.status != 0 || reply.async_status != 0) {
    *why = "replaying request " + std::to_string(entry.op) + " gave CUDA error " +
           std::to_string(reply.async_status != 0 ? reply.async_status : reply.status);
    return false;
  }
  if (entry.op == dp::kOpMemAlloc) {
    dp::MemAllocArgs args{};
    dp::MemAllocResult result{};
    if (!ReadStruct(entry.args, &args) || !ReadStruct(reply.out, &result) || result.dptr != args.address) {
      *why = "the new GPU did not place an allocation at its address";
      return false;
    }
  } else if (entry.op == dp::kOpModuleLoad) {
    dp::ModuleLoadArgs args{};
    dp::ModuleLoadResult result{};
    if (!ReadStruct(entry.args, &args) || !ReadStruct(reply.out, &result) ||
        (result.globals_size > 0 && result.globals_base != args.globals_base)) {
      *why = "the new GPU did not place a module's variables at their address";
      return false;
    }
  } else if (show_output) {
    ShowOutput(reply.out);
  }
  return true;
}

bool Failover::OfferHandoff(ClientConnection* old, Handoff* handoff) {
  // The reads the old GPU ran land in the application's buffers; the rest are sent again.
  int32_t first_error = 0;
  if (!old->Drain(&first_error).ok()) return false;
  Reply reply;
  Request offer{dp::kOpHandoffOffer, nullptr, 0, nullptr, 0, nullptr, 0};
  dp::HandoffOfferResult result{};
  if (!old->Call(offer, &reply).ok() || reply.status != 0 || reply.out.size() < sizeof(result)) {
    return false;
  }
  std::memcpy(&result, reply.out.data(), sizeof(result));
  result.ticket[sizeof(result.ticket) - 1] = '\0';
  handoff->ticket = result.ticket;
  handoff->last_seq = result.last_seq;
  ShowOutput(reply.out.substr(sizeof(result)));  // of kernels the old GPU ran
  return true;
}

// Only device memory changes (the handoff brings their effect).
static bool WritesMemoryOnly(uint32_t op) {
  return op == dp::kOpMemcpyHtoD || op == dp::kOpMemcpyDtoD || op == dp::kOpMemset || op == dp::kOpLaunch;
}

bool Failover::RebuildMoved(ClientConnection* connection, const Handoff& handoff, const GpuLocation& from,
                            Recovery* recovery, std::string* why) {
  // 1. The resources as the old GPU had them after its last request: the checkpoint's, and
  //    what the log made and freed since (the log's memory writes are in the handoff).
  if (!CreateCheckpointResources(connection, why)) return false;
  size_t ran = 0;  // log_[0, ran) ran on the old GPU
  while (ran < log_.size() && log_[ran].seq <= handoff.last_seq) ++ran;
  for (size_t i = 0; i < ran; ++i) {
    if (log_[i].op == kDroppedEntry || WritesMemoryOnly(log_[i].op)) continue;
    if (!Send(connection, log_[i], why, false)) return false;
  }
  // 2. The memory, straight from the old GPU's agent.
  dp::HandoffPullArgs pull{};
  std::snprintf(pull.endpoint, sizeof(pull.endpoint), "%s", from.endpoint.c_str());
  std::snprintf(pull.gpu_uuid, sizeof(pull.gpu_uuid), "%s", from.uuid.c_str());
  std::snprintf(pull.ticket, sizeof(pull.ticket), "%s", handoff.ticket.c_str());
  Reply reply;
  Status called = connection->Call({dp::kOpHandoffPull, &pull, sizeof(pull), nullptr, 0, nullptr, 0}, &reply);
  dp::HandoffPullResult pulled{};
  if (!called.ok() || reply.status != 0 || !ReadStruct(reply.out, &pulled)) {
    *why = !called.ok()        ? called.message()
           : reply.out.empty() ? "the handoff gave CUDA error " + std::to_string(reply.status)
                               : reply.out;
    return false;
  }
  recovery->copied_bytes = pulled.bytes;
  // 3. What the old GPU did not run, as a replay.
  for (size_t i = ran; i < log_.size(); ++i) {
    if (log_[i].op == kDroppedEntry) continue;
    if (!Send(connection, log_[i], why, true)) return false;
    ++recovery->replayed;
  }
  printf_delivered_ = std::max(printf_delivered_, ran);
  // 4. Reads the old GPU did not run.
  for (const StartedRequest& started : started_) {
    if (started.entry.seq <= handoff.last_seq) continue;
    Request request{started.entry.op, started.entry.args.data(), started.entry.args.size(), nullptr, 0,
                    started.result,   started.capacity};
    if (Status status = connection->Start(request); !status.ok()) {
      *why = status.message();
      return false;
    }
  }
  return true;
}

bool Failover::Rebuild(ClientConnection* connection, Recovery* recovery, std::string* why) {
  // 1. The resources of the checkpoint, in creation order (a module before its
  // functions).
  if (!CreateCheckpointResources(connection, why)) return false;
  // 2. Their memory as the checkpoint saw it.
  const auto restore_began = std::chrono::steady_clock::now();
  const StreamRestore streamed = RestoreInStreams(connection, recovery, why);
  if (streamed == StreamRestore::kFailed) return false;
  if (streamed == StreamRestore::kNotUsed && !RestoreOverSession(connection, recovery, why)) return false;
  recovery->restore =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - restore_began);
  // 3. The log: first what had shown its printf text (shown again it would
  // print twice),
  //    then the rest, whose text the application has not seen yet.
  for (size_t i = 0; i < log_.size(); ++i) {
    if (i == printf_delivered_ && i > 0) {
      Reply discard;
      Request synchronise{dp::kOpContextSynchronize, nullptr, 0, nullptr, 0, nullptr, 0};
      Status status = connection->Call(synchronise, &discard);
      if (!status.ok() || discard.status != 0 || discard.async_status != 0) {
        *why = status.ok() ? "replay failed with CUDA error " +
                                 std::to_string(discard.async_status ? discard.async_status : discard.status)
                           : status.message();
        return false;
      }
    }
    if (log_[i].op == kDroppedEntry) continue;
    if (!Send(connection, log_[i], why, i >= printf_delivered_)) return false;
    ++recovery->replayed;
  }
  // 4. Reads the application started and has not collected: they land in its
  // buffers.
  for (const StartedRequest& started : started_) {
    Request request{started.entry.op, started.entry.args.data(), started.entry.args.size(), nullptr, 0,
                    started.result,   started.capacity};
    Status status = connection->Start(request);
    if (!status.ok()) {
      *why = status.message();
      return false;
    }
  }
  return true;
}

// The images in saved_, then the snapshot images from the program's pages, except one a
// write had copied (sent from that copy, which becomes its image in saved_).
bool Failover::RestoreOverSession(ClientConnection* connection, Recovery* recovery, std::string* why) {
  for (const auto& [start, bytes] : saved_) {
    // Sent from the image itself: a copy of 1 GiB would cost more than its transfer.
    dp::MemcpyHtoDArgs args{start, bytes.size(), 0};
    Request restore{dp::kOpMemcpyHtoD, &args, sizeof(args), bytes.data(), bytes.size(), nullptr, 0};
    if (Status posted = connection->Post(restore); !posted.ok()) {
      *why = posted.message();
      return false;
    }
    recovery->restored_bytes += bytes.size();
  }
  for (auto image = image_snapshots_.begin(); image != image_snapshots_.end();) {
    dp::MemcpyHtoDArgs args{image->first, image->second.size(), 0};
    ArgBytes arg_bytes;
    arg_bytes.assign(reinterpret_cast<const char*>(&args), sizeof(args));
    JournalBytes copy;
    if (!SendSnapshot(connection, arg_bytes, &image->second, &copy, why)) return false;
    recovery->restored_bytes += args.size;
    if (image->second) {
      ++image;
    } else {
      saved_[image->first] = std::move(copy);
      image = image_snapshots_.erase(image);
    }
  }
  return true;
}

// One TCP stream, and the one agent thread receiving it, carries a few GiB/s: a large
// checkpoint goes over several connections at once, each a contiguous share of the images
// (split inside a range where a share ends). The session runs nothing meanwhile (the
// agent holds it to that: protocol.h); its next request ends the offer.
Failover::StreamRestore Failover::RestoreInStreams(ClientConnection* connection, Recovery* recovery, std::string* why) {
  uint64_t total = 0;
  for (const auto& [start, bytes] : saved_) total += bytes.size();
  for (const auto& [start, snapshot] : image_snapshots_) total += snapshot.size();
  if (config_.restore_streams < 2 || !open_restore_stream_ || total < config_.restore_streams_from) {
    return StreamRestore::kNotUsed;
  }
  Reply reply;
  Status called = connection->Call({dp::kOpRestoreOffer, nullptr, 0, nullptr, 0, nullptr, 0}, &reply);
  if (!called.ok()) {
    *why = called.message();
    return StreamRestore::kFailed;
  }
  dp::RestoreOfferResult offer{};
  if (reply.status != 0 || !ReadStruct(reply.out, &offer) || offer.streams < 2) {
    LogDebug("GPU %d: restoring over the session alone (%s)", device_,
             reply.status != 0 ? reply.out.c_str() : "the agent offers no restore streams");
    return StreamRestore::kNotUsed;
  }
  offer.ticket[sizeof(offer.ticket) - 1] = '\0';
  const uint32_t streams = std::min(config_.restore_streams, offer.streams);

  // The images, the snapshots' straight from the program's pages (read until EndRead).
  struct Piece {
    uint64_t dst;
    const char* bytes;
    uint64_t size;
  };
  std::vector<Piece> images;
  std::vector<std::pair<uint64_t, HostSnapshot*>> reading;
  for (const auto& [start, bytes] : saved_) images.push_back({start, bytes.data(), bytes.size()});
  for (auto image = image_snapshots_.begin(); image != image_snapshots_.end();) {
    if (const char* pages = image->second.BeginRead()) {
      reading.emplace_back(image->first, &image->second);
      images.push_back({image->first, pages, image->second.size()});
      ++image;
    } else {  // a write copied it first: that copy is its image now
      const uint64_t start = (image++)->first;
      const JournalBytes& copy = ImageBytes(start);
      images.push_back({start, copy.data(), copy.size()});
    }
  }
  std::vector<std::vector<Piece>> shares(streams);
  const uint64_t share = (total + streams - 1) / streams;
  uint32_t stream = 0;
  uint64_t filled = 0;
  for (const Piece& image : images) {
    for (uint64_t done = 0; done < image.size;) {
      const uint64_t room = stream + 1 < streams ? share - filled : image.size - done;
      const uint64_t take = std::min(image.size - done, room);
      shares[stream].push_back({image.dst + done, image.bytes + done, take});
      done += take;
      filled += take;
      if (filled >= share && stream + 1 < streams) {
        ++stream;
        filled = 0;
      }
    }
  }

  // Each stream opens, attaches with the ticket, posts its share and calls for its last
  // piece: that reply says whether every copy of the stream succeeded.
  std::vector<std::string> failures(streams);
  auto run = [&](uint32_t index) {
    const std::vector<Piece>& mine = shares[index];
    if (mine.empty()) return;
    std::string& failure = failures[index];
    std::unique_ptr<ClientConnection> restore = open_restore_stream_(recovery->to, &failure);
    if (restore == nullptr) return;
    dp::RestoreAttachArgs attach;
    std::snprintf(attach.ticket, sizeof(attach.ticket), "%s", offer.ticket);
    Reply attached;
    Status status = restore->Call({dp::kOpRestoreAttach, &attach, sizeof(attach), nullptr, 0, nullptr, 0}, &attached);
    if (!status.ok() || attached.status != 0) {
      failure = status.ok() ? "the agent refused it: " + attached.out : status.message();
      return;
    }
    for (size_t i = 0; i < mine.size(); ++i) {
      dp::MemcpyHtoDArgs args{mine[i].dst, mine[i].size, 0};
      Request copy{dp::kOpMemcpyHtoD, &args, sizeof(args), mine[i].bytes, mine[i].size, nullptr, 0};
      if (i + 1 < mine.size()) {
        status = restore->Post(copy);
      } else {
        Reply done;
        status = restore->Call(copy, &done);
        if (status.ok() && (done.status != 0 || done.async_status != 0)) {
          failure =
              "a copy gave CUDA error " + std::to_string(done.async_status != 0 ? done.async_status : done.status);
          return;
        }
      }
      if (!status.ok()) {
        failure = status.message();
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (uint32_t i = 1; i < streams; ++i) {
    try {
      threads.emplace_back(run, i);
    } catch (const std::exception& e) {  // no thread: that share is not sent
      failures[i] = std::string("no thread for it: ") + e.what();
    }
  }
  run(0);
  for (std::thread& thread : threads) thread.join();

  const auto failed = std::find_if(failures.begin(), failures.end(), [](const auto& f) { return !f.empty(); });
  // A snapshot written while it was sent goes again, from the copy its write made.
  std::vector<uint64_t> written;
  for (const auto& [start, snapshot] : reading) {
    if (!snapshot->EndRead()) written.push_back(start);
  }
  if (failed != failures.end()) {
    LogError("GPU %d: a restore stream failed (%s); restoring over the session alone", device_, failed->c_str());
    return StreamRestore::kNotUsed;
  }
  for (uint64_t start : written) {
    const JournalBytes& copy = ImageBytes(start);
    dp::MemcpyHtoDArgs args{start, copy.size(), 0};
    Status posted = connection->Post({dp::kOpMemcpyHtoD, &args, sizeof(args), copy.data(), copy.size(), nullptr, 0});
    if (!posted.ok()) {
      *why = posted.message();
      return StreamRestore::kFailed;
    }
  }
  recovery->restored_bytes += total;
  recovery->streams = streams;
  return StreamRestore::kDone;
}

bool Failover::Recover(std::unique_ptr<ClientConnection>* connection, GpuLocation* location,
                       dp::DeviceDescription* description, int32_t why) {
  if (!Recoverable(why)) return false;
  // The replay sends the log's bytes; the program has not synchronised since its held
  // uploads (it is inside a call), so their sources still hold what was sent.
  CaptureHeld();
  const auto began = std::chrono::steady_clock::now();
  const auto deadline = began + config_.recovery_deadline;
  const GpuLocation failed = *location;
  std::string last_problem = "the lease still names the failed GPU";
  bool waiting_logged = false;
  // A session the agent revoked because the lease moved off a healthy GPU keeps its memory
  // for the new GPU (a planned move: drain, gpupoolctl migrate).
  Handoff handoff;
  bool handing_off = why == dp::kCuNotPermitted && OfferHandoff(connection->get(), &handoff);
  if (handing_off) {
    LogError("GPU %d (%s): the lease moved to another GPU; moving there with its memory", device_, failed.uuid.c_str());
  } else if (config_.mode == FailoverConfig::Mode::kMigrate) {
    LogError(
        "GPU %d (%s) failed (CUDA error %d); GPUPOOL_FAILOVER=migrate follows planned "
        "moves only",
        device_, failed.uuid.c_str(), why);
    return false;
  } else if (in_background_ && !silent_named_.uuid.empty()) {  // gpupoold's word about a silent agent
    LogError(
        "GPU %d (%s): its agent is silent too (gpupoold found it gone for another GPU): recovering in the "
        "background on the GPU gpupoold names",
        device_, failed.uuid.c_str());
  } else if (in_background_) {
    LogError(
        "GPU %d (%s): its connection is lost too (another GPU's agent went away): recovering in the "
        "background on the GPU the lease names next",
        device_, failed.uuid.c_str());
  } else {
    LogError("GPU %d (%s) failed (CUDA error %d): recovering on the GPU the lease names next", device_,
             failed.uuid.c_str(), why);
    // The agent gone: the process's other GPUs it served start recovering now, alongside.
    // gpupoold named a replacement for a silent agent (silent_named_): its own probe found
    // the agent gone, and the other GPUs' connections to it will never say so themselves.
    if (why == dp::kCuDeviceUnavailable && agent_lost_ && config_.recover_together) {
      agent_lost_(failed, !silent_named_.uuid.empty());
    }
  }
  // gpupoold may already have named the replacement while a call waited on a silent agent.
  server_named_ = std::exchange(silent_named_, GpuLocation());
  next_report_ = began;
  report_backoff_ = std::chrono::milliseconds(0);
  // A background recovery gives its wait up when the process shuts down (StopBackground).
  auto stopped = [this] { return in_background_ && stop_background_.load(std::memory_order_relaxed); };
  while (std::chrono::steady_clock::now() < deadline && !stopped()) {
    GpuLocation next;
    // A lost connection may be the session's worker alone (its agent then opens a new
    // session at once): gpupoold hears of it only once the agent itself did not answer.
    if (why != dp::kCuDeviceUnavailable || handing_off) MaybeReportLost(failed);
    if (Locate(failed, why, &next)) {
      dp::DeviceDescription fresh{};
      int32_t refusal = 0;
      std::unique_ptr<ClientConnection> session = open_session_(next, &fresh, &last_problem, &refusal);
      if (session != nullptr) {
        Recovery recovery;
        recovery.from = failed;
        recovery.to = next;
        const bool moved = handing_off && next.uuid != failed.uuid;
        replay_lost_transport_ = false;
        if (moved ? RebuildMoved(session.get(), handoff, failed, &recovery, &last_problem)
                  : Rebuild(session.get(), &recovery, &last_problem)) {
          // The old connection goes only now: closing it may wait for a peer
          // that is gone.
          connection->swap(session);
          session.reset();
          *location = next;
          *description = fresh;
          recovery.pause =
              std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
          // The new agent tells gpupoold (a "recovered" event); best effort.
          dp::RecoveredArgs report{static_cast<uint64_t>(recovery.pause.count()),
                                   recovery.restored_bytes,
                                   recovery.replayed,
                                   {},
                                   recovery.copied_bytes};
          std::snprintf(report.from, sizeof(report.from), "%s", failed.uuid.c_str());
          // What ran before now ran on this GPU (its seqs are another connection's).
          for (Entry& entry : log_) entry.seq = 0;
          for (StartedRequest& started : started_) started.entry.seq = 0;
          (void)(*connection)->Post({dp::kOpRecovered, &report, sizeof(report), nullptr, 0, nullptr, 0});
          if (moved) {
            LogError(
                "GPU %d: moved to %s at %s in %lld ms (memory copied agent to agent: %s, "
                "replayed %zu operation(s))",
                device_, next.uuid.c_str(), next.endpoint.c_str(), static_cast<long long>(recovery.pause.count()),
                Size(recovery.copied_bytes).c_str(), recovery.replayed);
          } else {
            LogError(
                "GPU %d: recovered on %s at %s in %lld ms (restored %s in %lld ms over %u connection(s), replayed %zu "
                "operation(s))",
                device_, next.uuid.c_str(), next.endpoint.c_str(), static_cast<long long>(recovery.pause.count()),
                Size(recovery.restored_bytes).c_str(), static_cast<long long>(recovery.restore.count()),
                recovery.streams, recovery.replayed);
          }
          recoveries_.push_back(recovery);
          abandoned_ = nullptr;
          return true;
        }
        if (moved && config_.mode == FailoverConfig::Mode::kMigrate) {
          LogError(
              "GPU %d: the handoff from %s failed (%s); GPUPOOL_FAILOVER=migrate keeps no "
              "checkpoint to recover from",
              device_, failed.uuid.c_str(), last_problem.c_str());
          return false;
        }
        if (replay_lost_transport_ && !moved) {
          // The new session's process ended while it replayed this process's own work: the
          // work ends whatever runs it (a tenant fault, never the GPU's), so no other GPU
          // is tried with it (gpupool-remote(7), FAILOVER).
          LogError(
              "GPU %d: replaying this process's work on %s ended that session too (%s): "
              "the program's own work ends the sessions that run it; not recovering "
              "again",
              device_, next.uuid.c_str(), last_problem.c_str());
          return false;
        }
        if (moved) {
          // The checkpoint and the whole log still hold: recover from them on a fresh session.
          LogError("GPU %d: the handoff from %s failed (%s); recovering from the checkpoint", device_,
                   failed.uuid.c_str(), last_problem.c_str());
          handing_off = false;
          continue;
        }
        // The replacement failed too, or refused us: wait for the lease to move
        // again.
      }
      // gpupoold named another GPU: try it now, not after the wait below.
      if (next.uuid == failed.uuid && MaybeReportLost(failed)) continue;
    }
    if (!waiting_logged && std::chrono::steady_clock::now() - began > std::chrono::seconds(5)) {
      waiting_logged = true;
      LogError(
          "GPU %d: still waiting for a replacement GPU (%s); giving up "
          "after %lld s",
          device_, last_problem.c_str(),
          static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(config_.recovery_deadline).count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (stopped()) {
    LogError("GPU %d: recovery stopped: the process is shutting down", device_);
    return false;
  }
  LogError("GPU %d: no replacement within the recovery deadline (%s)", device_, last_problem.c_str());
  return false;
}

void Failover::RecoverInBackground(Channel* channel, const GpuLocation& lost, bool confirmed) {
  if (config_.mode != FailoverConfig::Mode::kReplay || !config_.recover_together) return;
  std::lock_guard<std::mutex> lock(background_mu_);
  if (background_running_ || stop_background_.load()) return;
  if (background_.joinable()) background_.join();  // the last one's, ended
  background_running_ = true;
  background_ = std::thread(&Failover::RunBackgroundRecovery, this, channel, lost, confirmed);
}

void Failover::RunBackgroundRecovery(Channel* channel, GpuLocation lost, bool confirmed) {
  {
    std::unique_lock<std::mutex> wire(mu_, std::defer_lock);
    LockUnlessStopped(&wire);
    // Checked once the connection is known broken: the program's own call may have
    // recovered it meanwhile (its connection is then a new one, open).
    const bool gone = wire.owns_lock() && ConnectionGone(channel, lost, confirmed, &wire);
    if (gone && protecting_ && recovered_ == nullptr && channel->connection.get() != abandoned_) {
      ++background_started_;
      GpuLocation location = channel->location;
      dp::DeviceDescription description = channel->description;
      std::unique_ptr<ClientConnection> session;  // Recover swaps the new session in
      // Nothing more goes to the old agent: a silent one would hold a send, or the close at
      // the handover (Deliver), forever. A failed recovery leaves it so: the next request
      // gets the error at once (abandoned_), not after a wait of its own on a silent agent.
      if (channel->connection != nullptr) channel->connection->Abandon();
      in_background_ = true;
      const bool recovered = Recover(&session, &location, &description, dp::kCuDeviceUnavailable);
      in_background_ = false;
      if (recovered) {
        recovered_ = std::move(session);
        recovered_location_ = location;
        recovered_description_ = description;
      } else {
        abandoned_ = channel->connection.get();
      }
    } else if (gone) {
      silent_named_ = GpuLocation();  // gpupoold's answer, for a recovery that does not run
    }
  }
  std::lock_guard<std::mutex> lock(background_mu_);
  background_running_ = false;
}

bool Failover::ConnectionGone(Channel* channel, const GpuLocation& lost, bool confirmed,
                              std::unique_lock<std::mutex>* wire) {
  const bool same_agent = channel->location.endpoint == lost.endpoint;
  if (same_agent && confirmed && channel->connection != nullptr) {
    // A silent agent (its host stopped, or cut off without a reset) closes no socket: its
    // connections never say it is gone. gpupoold's word does, asked about this slot (at
    // once: it holds that host unreachable now), never this process's own view.
    return channel->connection->PeerGone() || SilentAgentReplaced(channel->location);
  }
  const auto until = std::chrono::steady_clock::now() + kPeerGoneGrace;
  for (;;) {
    if (channel->connection != nullptr && channel->connection->PeerGone()) return true;
    if (!same_agent || std::chrono::steady_clock::now() >= until || stop_background_.load()) return false;
    wire->unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!LockUnlessStopped(wire)) return false;
  }
}

bool Failover::SilentAgentReplaced(const GpuLocation& at) {
  if (!report_lost_) return false;
  GpuLocation named;
  std::string problem;
  if (!report_lost_(at, slot_, &named, &problem)) {
    LogDebug("GPU %d (%s): could not ask gpupoold about its silent agent (%s)", device_, at.uuid.c_str(),
             problem.c_str());
    return false;
  }
  if (named.uuid.empty() || named.uuid == at.uuid) return false;  // its agent answered
  silent_named_ = named;
  return true;
}

bool Failover::LockUnlessStopped(std::unique_lock<std::mutex>* wire) {
  // mu() is held by a call of the program's to this GPU, if any (which may then recover the
  // GPU itself): waited for in steps, so that StopBackground never waits on that call.
  while (!wire->try_lock()) {
    if (stop_background_.load()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void Failover::StopBackground() {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(background_mu_);
    stop_background_.store(true);
    thread = std::move(background_);
  }
  if (thread.joinable()) thread.join();
  // A session recovered that no call took up: closed cleanly, as Shutdown closes the
  // others (a call that holds mu() now takes it up itself).
  std::unique_lock<std::mutex> wire(mu_, std::try_to_lock);
  if (wire.owns_lock()) recovered_.reset();
}

}  // namespace gpupool::client
