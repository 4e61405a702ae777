// A tiny job scheduler for a home server: jobs live in a JSON file, each with a cron-like
// schedule ("every 15m", "daily 03:30", "weekly mon 09:00"), and run as shell commands.
// The runner wakes once a minute, runs what is due, and records the outcome of each run.

const fs = require("fs");
const path = require("path");
const { exec } = require("child_process");

const JOBS_FILE = path.join(__dirname, "jobs.json");
const LOG_FILE = path.join(__dirname, "runs.log");
const TICK_MS = 60 * 1000;
const MAX_OUTPUT = 4000;
const DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

function parseSchedule(text) {
  const parts = text.trim().split(/\s+/);
  if (parts[0] === "every") {
    const match = /^(\d+)([mh])$/.exec(parts[1] || "");
    if (!match) {
      throw new Error("bad interval: " + text);
    }
    const amount = parseInt(match[1], 10);
    const minutes = match[2] === "h" ? amount * 60 : amount;
    return { kind: "every", minutes: minutes };
  }
  if (parts[0] === "daily") {
    return { kind: "daily", time: parseTime(parts[1], text) };
  }
  if (parts[0] === "weekly") {
    const day = DAYS.indexOf((parts[1] || "").toLowerCase());
    if (day < 0) {
      throw new Error("bad day: " + text);
    }
    return { kind: "weekly", day: day, time: parseTime(parts[2], text) };
  }
  throw new Error("unknown schedule: " + text);
}

function parseTime(value, text) {
  const match = /^(\d{1,2}):(\d{2})$/.exec(value || "");
  if (!match) {
    throw new Error("bad time: " + text);
  }
  const hours = parseInt(match[1], 10);
  const minutes = parseInt(match[2], 10);
  if (hours > 23 || minutes > 59) {
    throw new Error("bad time: " + text);
  }
  return { hours: hours, minutes: minutes };
}

function isDue(job, now) {
  const schedule = job.schedule;
  const last = job.lastRun ? new Date(job.lastRun) : null;
  if (schedule.kind === "every") {
    if (!last) {
      return true;
    }
    return now - last >= schedule.minutes * 60 * 1000;
  }
  const atTime = now.getHours() === schedule.time.hours && now.getMinutes() === schedule.time.minutes;
  if (!atTime) {
    return false;
  }
  if (schedule.kind === "weekly" && now.getDay() !== schedule.day) {
    return false;
  }
  if (last && now - last < 60 * 1000) {
    return false;
  }
  return true;
}

function loadJobs(callback) {
  fs.readFile(JOBS_FILE, "utf8", function (err, text) {
    if (err) {
      if (err.code === "ENOENT") {
        callback(null, []);
        return;
      }
      callback(err);
      return;
    }
    let raw;
    try {
      raw = JSON.parse(text);
    } catch (parseError) {
      callback(new Error("jobs.json is not valid JSON: " + parseError.message));
      return;
    }
    const jobs = [];
    for (const entry of raw) {
      try {
        jobs.push({
          name: entry.name,
          command: entry.command,
          schedule: parseSchedule(entry.schedule),
          scheduleText: entry.schedule,
          lastRun: entry.lastRun || null,
          lastStatus: entry.lastStatus || null,
          enabled: entry.enabled !== false,
        });
      } catch (scheduleError) {
        console.error("skipping job " + entry.name + ": " + scheduleError.message);
      }
    }
    callback(null, jobs);
  });
}

function saveJobs(jobs, callback) {
  const raw = jobs.map(function (job) {
    return {
      name: job.name,
      command: job.command,
      schedule: job.scheduleText,
      lastRun: job.lastRun,
      lastStatus: job.lastStatus,
      enabled: job.enabled,
    };
  });
  const tmp = JOBS_FILE + ".tmp";
  fs.writeFile(tmp, JSON.stringify(raw, null, 2), function (err) {
    if (err) {
      callback(err);
      return;
    }
    fs.rename(tmp, JOBS_FILE, callback);
  });
}

function runJob(job, callback) {
  const started = new Date();
  exec(job.command, { timeout: 10 * 60 * 1000, maxBuffer: 1024 * 1024 }, function (err, stdout, stderr) {
    const finished = new Date();
    const status = err ? "failed" : "ok";
    const output = (stdout + stderr).slice(-MAX_OUTPUT);
    const line = [
      started.toISOString(),
      job.name,
      status,
      ((finished - started) / 1000).toFixed(1) + "s",
      JSON.stringify(output),
    ].join("\t");
    fs.appendFile(LOG_FILE, line + "\n", function (logError) {
      if (logError) {
        console.error("could not write the run log: " + logError.message);
      }
      job.lastRun = started.toISOString();
      job.lastStatus = status;
      callback(null, status);
    });
  });
}

function runDue(jobs, now, callback) {
  const due = jobs.filter(function (job) {
    return job.enabled && isDue(job, now);
  });
  let remaining = due.length;
  if (remaining === 0) {
    callback(null, 0);
    return;
  }
  due.forEach(function (job) {
    runJob(job, function () {
      remaining -= 1;
      if (remaining === 0) {
        callback(null, due.length);
      }
    });
  });
}

function tick() {
  loadJobs(function (err, jobs) {
    if (err) {
      console.error(err.message);
      return;
    }
    runDue(jobs, new Date(), function (runError, count) {
      if (count === 0) {
        return;
      }
      saveJobs(jobs, function (saveError) {
        if (saveError) {
          console.error("could not save jobs: " + saveError.message);
        }
      });
    });
  });
}

function listJobs() {
  loadJobs(function (err, jobs) {
    if (err) {
      console.error(err.message);
      process.exitCode = 1;
      return;
    }
    for (const job of jobs) {
      const state = job.enabled ? "on " : "off";
      const last = job.lastRun ? job.lastRun + " " + job.lastStatus : "never run";
      console.log(state + "  " + job.name.padEnd(20) + job.scheduleText.padEnd(18) + last);
    }
  });
}

if (require.main === module) {
  if (process.argv[2] === "list") {
    listJobs();
  } else {
    tick();
    setInterval(tick, TICK_MS);
  }
}

module.exports = { parseSchedule, parseTime, isDue, loadJobs, saveJobs, runJob, runDue };
