//! [`ChatTemplate`]: the Jinja chat template a model file carries
//! (`tokenizer.chat_template` in GGUF, `chat_template` in Hugging Face's
//! `tokenizer_config.json`), rendered with `minijinja` as `transformers`'
//! `apply_chat_template` renders it: the variables `messages`,
//! `add_generation_prompt`, `bos_token`, `eos_token`, the function
//! `raise_exception`, and Python's string methods.

use minijinja::{context, Environment, Error as JinjaError, ErrorKind, Value};

use retrograd_engine::base::error::{Error, Result};

const OP: &str = "ChatTemplate";

/// Who said a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Instructions for the assistant.
    System,
    /// The person.
    User,
    /// The model.
    Assistant,
}

impl Role {
    /// The name templates compare against (`"user"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = Error;
    fn from_str(s: &str) -> Result<Role> {
        match s {
            "system" | "developer" => Ok(Role::System),
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            other => Err(Error::invalid(
                OP,
                format!("role `{other}` is not system, user or assistant"),
            )),
        }
    }
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
}

impl Message {
    /// A message.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
        }
    }
}

/// A compiled chat template (see the module docs).
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

fn raise_exception(message: String) -> std::result::Result<String, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, message))
}

impl ChatTemplate {
    /// Compiles `source`; a template that does not parse is an error with
    /// minijinja's message (line and cause). `bos_token` and `eos_token`
    /// are the texts templates may print.
    pub fn try_new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        // Templates are whitespace-exact as transformers renders them:
        // `trim_blocks`/`lstrip_blocks` on, as in its sandboxed environment.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| Error::invalid(OP, format!("the chat template does not parse: {e:#}")))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// [`try_new`](Self::try_new), panicking on a bad template.
    #[track_caller]
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Self {
        retrograd_engine::base::error::or_panic(Self::try_new(source, bos_token, eos_token))
    }

    /// The conversation as the model reads it; with
    /// `add_generation_prompt`, ending where the assistant's next message
    /// begins. A template's own `raise_exception` (a bad role order, say)
    /// is an error with its message.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let template = self.env.get_template("chat").expect("added in try_new");
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                Value::from_iter([
                    ("role", Value::from(m.role.as_str())),
                    ("content", Value::from(m.content.as_str())),
                ])
            })
            .collect();
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| Error::invalid(OP, format!("rendering failed: {e:#}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_chatml_with_python_methods_and_raises() {
        let source = "{% for m in messages %}{% if m.role == 'user' and m.content.strip() == '' %}\
            {{ raise_exception('empty user message') }}{% endif %}\
            <|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}\
            {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let t = ChatTemplate::new(source, "<s>", "</s>");
        let messages = [
            Message::new(Role::System, "Be brief."),
            Message::new(Role::User, " Hi "),
        ];
        assert_eq!(
            t.render(&messages, true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let err = t
            .render(&[Message::new(Role::User, "  ")], false)
            .unwrap_err();
        assert!(err.to_string().contains("empty user message"), "{err}");
        assert!(ChatTemplate::try_new("{% for %}", "", "").is_err());
        assert!("robot".parse::<Role>().is_err());
    }
}
